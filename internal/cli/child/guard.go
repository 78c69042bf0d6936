package child

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// GuardArg, as the first argument, turns the tenure binary (or a test
// binary that calls RunGuardIfRequested) into the guard.
const GuardArg = "__guard"

// File descriptors the guard receives (exec.Cmd.ExtraFiles start at 3).
const (
	controlFD = 3 // read end: requests from the supervisor
	statusFD  = 4 // write end: "started PID", "exited CODE SIGNAL [deadline]", "failed MSG", "late"
)

// Requests sent over the control pipe, each a byte, reqDeadline followed by
// its instant (deadlineMsg; the package doc has the whole protocol).
// Closing the pipe (which the kernel does when the supervising process
// dies, however it dies) means: kill the group now.
const (
	reqTerm     = 'T'
	reqKill     = 'K'
	reqInt      = 'I'
	reqHup      = 'H' // pass SIGHUP on (a reload), unless stopping
	reqDeadline = 'D'
)

// RunGuardIfRequested runs the guard and exits when os.Args asks for it, and
// returns otherwise. Call it first thing in main (and in TestMain of tests
// that start children), before flags are parsed.
func RunGuardIfRequested() {
	if len(os.Args) > 1 && os.Args[1] == GuardArg {
		os.Exit(guardMain(os.Args[2:]))
	}
}

// guardArgs are the guard's arguments after GuardArg: the supervisor's pid,
// the initial deadline (a CLOCK_BOOTTIME instant in nanoseconds, 0 for
// none), the stop timeout, the command's path and its arguments. The
// deadline is an argument rather than a request so that it binds before
// the command starts: a supervisor frozen right after Start is covered.
type guardArgs struct {
	parent      int
	deadline    int64
	stopTimeout time.Duration
	path        string
	args        []string
}

func (a guardArgs) encode() []string {
	return append([]string{GuardArg, strconv.Itoa(a.parent), strconv.FormatInt(a.deadline, 10), a.stopTimeout.String(), a.path}, a.args...)
}

func parseGuardArgs(args []string) (guardArgs, error) {
	if len(args) < 4 {
		return guardArgs{}, errors.New("too few arguments")
	}
	var a guardArgs
	var err1, err2, err3 error
	a.parent, err1 = strconv.Atoi(args[0])
	a.deadline, err2 = strconv.ParseInt(args[1], 10, 64)
	a.stopTimeout, err3 = time.ParseDuration(args[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return guardArgs{}, err
	}
	a.path, a.args = args[3], args[4:]
	return a, nil
}

// guardMain is the guard process. It starts the command in a new process
// group and kills that whole group the moment the supervisor is gone, and
// stops it (SIGTERM, then SIGKILL after the stop timeout) when its deadline
// passes without a new one from the supervisor.
func guardMain(args []string) int {
	a, err := parseGuardArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tenure: the guard is started by tenure itself, not by hand:", err)
		return 2
	}
	// The pipes must not leak into the command: a command holding the
	// control pipe's read end is harmless, but one holding the status
	// pipe's write end would keep the supervisor waiting after we exit.
	syscall.CloseOnExec(controlFD)
	syscall.CloseOnExec(statusFD)
	control := os.NewFile(controlFD, "control")
	status := os.NewFile(statusFD, "status")
	if control == nil || status == nil {
		fmt.Fprintln(os.Stderr, "tenure guard: control pipes missing")
		return 2
	}

	// Pdeathsig delivers SIGTERM when the supervisor dies. Subscribe before
	// checking the parent so that a death between the check and the
	// subscription cannot be missed.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if os.Getppid() != a.parent {
		// The supervisor died before Pdeathsig was armed: start nothing.
		return 1
	}

	timer, err := armTimer(a.deadline)
	if errors.Is(err, errDeadlinePassed) {
		fmt.Fprintln(status, "late")
		return 127
	}
	if err != nil {
		fmt.Fprintf(status, "failed %s\n", oneLine(err.Error()))
		return 127
	}

	cmd := exec.Command(a.path, a.args...)
	cmd.Args[0] = a.path
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // same files: no copying
	// Pdeathsig kills the command should the guard die too (kill -9 of
	// tenure and guard at once, as pkill -9 tenure does).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnLockedThread(cmd); err != nil {
		fmt.Fprintf(status, "failed %s\n", oneLine(err.Error()))
		return 127
	}
	g := &guard{pgid: cmd.Process.Pid, timer: timer, stopTimeout: max(a.stopTimeout, 0), deadline: a.deadline}
	fmt.Fprintf(status, "started %d\n", g.pgid)

	requests := make(chan request)
	go readRequests(control, requests)
	fired := make(chan error)
	go func() {
		for {
			err := timer.wait()
			fired <- err
			if err != nil {
				return
			}
		}
	}()
	go func() {
		for range sigs {
			// Pdeathsig fires when the *thread* that forked us exits
			// (golang/go#27505), which a Go program can do while alive;
			// only a changed parent means the supervisor is gone, and the
			// control pipe's EOF reports that anyway. Signals from a person
			// are ignored for the same reason: tenure decides.
			if os.Getppid() != a.parent {
				_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	for done := false; !done; {
		select {
		case r, ok := <-requests:
			if !ok {
				// The supervisor is gone: nobody may keep working on its lease.
				g.signal(syscall.SIGKILL)
				return 1
			}
			g.request(r)
		case err := <-fired:
			g.fired(err)
		case <-waited:
			done = true
		}
	}
	// The command is gone; whatever it left in its group must not run on
	// unsupervised (the lease is about to be released or restarted).
	g.signal(syscall.SIGKILL)
	code, sig := -1, 0
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			sig = int(ws.Signal())
		case ws.Exited():
			code = ws.ExitStatus()
		}
	}
	flag := ""
	if g.stopping {
		flag = " deadline"
	}
	fmt.Fprintf(status, "exited %d %d%s\n", code, sig, flag)
	return 0
}

var errDeadlinePassed = errors.New("its deadline passed before it started")

// armTimer returns the guard's timer armed for deadline. A guard that
// cannot keep the deadline must not start the command, and neither may one
// whose deadline has passed: the supervisor may have been frozen between
// Start and now.
func armTimer(deadline int64) (*bootTimer, error) {
	timer, err := newBootTimer()
	if err != nil {
		return nil, err
	}
	if err := timer.set(deadline); err != nil {
		return nil, err
	}
	if deadline == noDeadline {
		return timer, nil
	}
	now, err := bootNow()
	if err == nil && now >= deadline {
		err = errDeadlinePassed
	}
	return timer, err
}

// guard is the state of a guard's main loop, which alone touches it.
type guard struct {
	pgid        int
	timer       *bootTimer
	stopTimeout time.Duration
	deadline    int64 // CLOCK_BOOTTIME; noDeadline: none
	termSent    bool  // the group has had a SIGTERM
	stopping    bool  // the deadline passed: SIGKILL follows at killAt
	killAt      int64
}

// signal sends sig to the command's group. Its pid cannot have been reused
// while the guard has not reaped it.
func (g *guard) signal(sig syscall.Signal) {
	if sig == syscall.SIGTERM {
		g.termSent = true
	}
	_ = syscall.Kill(-g.pgid, sig)
}

func (g *guard) request(r request) {
	switch r.op {
	case reqKill:
		g.signal(syscall.SIGKILL)
	case reqTerm, reqInt:
		if g.stopping {
			return // stopping on its own already; SIGKILL follows
		}
		sig := syscall.SIGTERM
		if r.op == reqInt {
			sig = syscall.SIGINT
		}
		g.signal(sig)
	case reqHup:
		// To the command alone (the group's leader), as systemd's reload
		// does: its helpers may not expect SIGHUP, whose default is to die.
		if !g.stopping && !g.termSent {
			_ = syscall.Kill(g.pgid, syscall.SIGHUP)
		}
	case reqDeadline:
		if g.stopping {
			return // too late: the deadline passed first
		}
		g.deadline = r.deadline
		if err := g.timer.set(r.deadline); err != nil {
			g.failed(err)
		}
	}
}

// fired handles the timer: the deadline passed (stop the command), the
// stop timeout after that passed (kill it), or a firing for an instant
// since replaced (nothing).
func (g *guard) fired(err error) {
	now, clockErr := bootNow()
	if err = errors.Join(err, clockErr); err != nil {
		g.failed(err)
		return
	}
	switch {
	case g.stopping:
		if now >= g.killAt {
			g.signal(syscall.SIGKILL)
		}
	case g.deadline != noDeadline && now >= g.deadline:
		g.stopping = true
		if !g.termSent {
			g.signal(syscall.SIGTERM)
		}
		g.killAt = now + int64(g.stopTimeout)
		if err := g.timer.set(g.killAt); err != nil {
			g.failed(err)
		}
	}
}

// failed handles a broken timer: a guard that cannot keep the deadline
// cannot let the command run on.
func (g *guard) failed(err error) {
	fmt.Fprintln(os.Stderr, "tenure guard: cannot keep the deadline; killing the command:", err)
	g.stopping = true
	g.signal(syscall.SIGKILL)
}

// request is one decoded control message.
type request struct {
	op       byte
	deadline int64 // of reqDeadline
}

// readRequests decodes the supervisor's requests onto out, and closes out
// when the control pipe closes (the supervisor is gone) or carries a
// request it does not know: the two ends then disagree on the protocol,
// nothing after it can be trusted, and the command is killed as if the
// supervisor were gone.
func readRequests(control io.Reader, out chan<- request) {
	defer close(out)
	r := bufio.NewReader(control)
	for {
		op, err := r.ReadByte()
		if err != nil {
			return
		}
		req := request{op: op}
		switch op {
		case reqTerm, reqKill, reqInt, reqHup:
		case reqDeadline:
			var b [deadlineMsgLen - 1]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return
			}
			req.deadline = int64(binary.BigEndian.Uint64(b[:]))
		default:
			fmt.Fprintf(os.Stderr, "tenure guard: unknown request %q from tenure; killing the command\n", op)
			return
		}
		out <- req
	}
}

// startOnLockedThread starts cmd from a thread that lives as long as the
// guard. Pdeathsig fires when the thread that forked the child exits, not
// the process (golang/go#27505), and the runtime ends a thread whenever a
// goroutine that locked it returns; an unlocked goroutine could fork from
// such a thread. This goroutine locks its thread and never returns, so the
// thread ends only with the guard.
func startOnLockedThread(cmd *exec.Cmd) error {
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must not be reused or ended
		started <- cmd.Start()
		select {}
	}()
	return <-started
}

func oneLine(s string) string {
	out := []rune(s)
	for i, r := range out {
		if r == '\n' || r == '\r' {
			out[i] = ' '
		}
	}
	return string(out)
}
