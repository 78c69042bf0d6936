package child

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
)

// GuardArg, as the first argument, turns the tenure binary (or a test
// binary that calls RunGuardIfRequested) into the guard.
const GuardArg = "__guard"

// File descriptors the guard receives (exec.Cmd.ExtraFiles start at 3).
const (
	controlFD = 3 // read end: one byte per request from the supervisor
	statusFD  = 4 // write end: "started PID", "exited CODE SIGNAL", "failed MSG"
)

// Requests sent over the control pipe. Closing the pipe (which the kernel
// does when the supervising process dies, however it dies) means: kill the
// group now.
const (
	reqTerm = 'T'
	reqKill = 'K'
	reqInt  = 'I'
)

// RunGuardIfRequested runs the guard and exits when os.Args asks for it, and
// returns otherwise. Call it first thing in main (and in TestMain of tests
// that start children), before flags are parsed.
func RunGuardIfRequested() {
	if len(os.Args) > 1 && os.Args[1] == GuardArg {
		os.Exit(guardMain(os.Args[2:]))
	}
}

// guardMain is the guard process: args are the supervisor's pid, the
// command's path and its arguments. It starts the command in a new process
// group and kills that whole group the moment the supervisor is gone.
func guardMain(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "tenure: the guard is started by tenure itself, not by hand")
		return 2
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tenure guard: bad parent pid")
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
	if os.Getppid() != parent {
		// The supervisor died before Pdeathsig was armed: start nothing.
		return 1
	}

	cmd := exec.Command(args[1], args[2:]...)
	cmd.Args[0] = args[1]
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr // same files: no copying
	// Pdeathsig kills the command should the guard die too (kill -9 of
	// tenure and guard at once, as pkill -9 tenure does).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnLockedThread(cmd); err != nil {
		fmt.Fprintf(status, "failed %s\n", oneLine(err.Error()))
		return 127
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(status, "started %d\n", pgid)

	parentGone := make(chan struct{})
	go func() {
		defer close(parentGone)
		readRequests(control, pgid)
	}()
	go func() {
		for range sigs {
			// Pdeathsig fires when the *thread* that forked us exits
			// (golang/go#27505), which a Go program can do while alive;
			// only a changed parent means the supervisor is gone, and the
			// control pipe's EOF reports that anyway. Signals from a person
			// are ignored for the same reason: tenure decides.
			if os.Getppid() != parent {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
	}()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-parentGone:
		// The supervisor is gone: nobody may keep working on its lease.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return 1
	case <-waited:
	}
	// The command is gone; whatever it left in its group must not run on
	// unsupervised (the lease is about to be released or restarted).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	code, sig := -1, 0
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			sig = int(ws.Signal())
		case ws.Exited():
			code = ws.ExitStatus()
		}
	}
	fmt.Fprintf(status, "exited %d %d\n", code, sig)
	return 0
}

// readRequests forwards the supervisor's requests to the command's group
// until the control pipe closes, which means the supervisor is gone.
func readRequests(control io.Reader, pgid int) {
	r := bufio.NewReader(control)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return
		}
		switch b {
		case reqTerm:
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
		case reqInt:
			_ = syscall.Kill(-pgid, syscall.SIGINT)
		case reqKill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
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
