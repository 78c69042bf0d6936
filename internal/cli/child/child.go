// Package child runs a command as a supervised child on Linux, so that it
// never outlives the lease it runs under.
//
// The command runs in its own process group, and Stop sends SIGTERM to the
// whole group, then SIGKILL once the stop timeout has passed. Stopping is
// the easy half; the hard half is the supervisor's own failure. When it
// dies (kill -9, the OOM killer, a crash), a peer takes the lease while an
// orphan would still be working; when it is frozen (SIGSTOP, starved of
// CPU, deadlocked), it cannot stop anything, and the peer starts at expiry
// + grace all the same. Pdeathsig alone does not cover death: it reaches
// only the direct child, not the grandchildren in its group, and it fires
// when the forking *thread* exits rather than the process
// (golang/go#27505). Nothing in the supervisor covers freezing.
//
// So the command is started through a guard: the tenure binary itself
// re-executed as `tenure __guard`, in a process group of its own. The guard
// starts the command in a second new group and holds the read end of a
// pipe whose only write end is in the supervisor. When the supervisor dies,
// however it dies, the kernel closes that end, the guard reads EOF and
// SIGKILLs the command's group within milliseconds. Pdeathsig (SIGTERM to
// the guard) and a check of the parent pid right after start are the
// second line: a signal only counts when the parent pid has changed, which
// makes a spurious Pdeathsig from an exiting thread harmless — so Start may
// be called from any goroutine and needs no runtime.LockOSThread.
//
// When the guard dies too (pkill -9 tenure matches both, the guard's
// argv[0] being tenure-guard), Pdeathsig SIGKILL on the command, set by the
// guard, kills it. The guard forks it from a goroutine locked to its thread
// that never returns, so that thread — whose exit is what fires Pdeathsig —
// lives exactly as long as the guard.
//
// # The deadline
//
// The guard enforces the lease's safety deadline on its own. Start hands it
// the first one (Command.Deadline) as an argument, so that it binds before
// the command starts and a supervisor frozen right after Start is covered;
// SetDeadline sends each later one (tenure: after every confirmed renewal).
// When the current deadline passes without a new one, the guard stops the
// group itself — SIGTERM, then SIGKILL after Command.StopTimeout — and
// reports the exit as usual, marked Exit.Deadline. A deadline already passed
// when the guard is ready starts nothing (ErrDeadline).
//
// Deadlines travel as absolute CLOCK_BOOTTIME instants: the sender reads
// CLOCK_BOOTTIME and time.Until(deadline) together and adds them; the guard
// waits on a timerfd on CLOCK_BOOTTIME armed with TFD_TIMER_ABSTIME,
// re-armed for each new deadline. Every process on the host shares that
// clock, so a message's time in the pipe does not shift the instant, and
// it keeps counting while the machine is suspended (CLOCK_MONOTONIC, which
// Go's timers use, stops): a resumed machine stops the command at once, and
// no frozen sender can delay it.
//
// # Protocol
//
// The guard's arguments: __guard PARENT_PID DEADLINE STOP_TIMEOUT PATH
// ARGS..., DEADLINE in CLOCK_BOOTTIME nanoseconds (0: none) and STOP_TIMEOUT
// a Go duration. Requests on the control pipe (fd 3, supervisor to guard)
// each begin with a byte:
//
//	T            SIGTERM to the group
//	I            SIGINT to the group
//	K            SIGKILL to the group
//	D + 8 bytes  the new deadline, a big-endian int64 as above (0: none)
//	EOF          the supervisor is gone: SIGKILL to the group, exit
//
// Any other byte means the two ends disagree on the protocol and nothing
// after it can be parsed: the guard treats it as EOF. Once the guard is
// stopping the command at its deadline it ignores T, I and D; K still
// kills at once. Reports on the status pipe (fd 4, guard to supervisor)
// are lines:
//
//	started PID                     running; PID is also its group id
//	failed MESSAGE                  could not be started
//	late                            the deadline had passed: not started
//	exited CODE SIGNAL [deadline]   ended; "deadline" if the guard stopped it
//
// After the command exits, the guard SIGKILLs whatever it left in its
// group: nothing keeps running unsupervised.
//
// Not covered: a descendant that leaves the group (setsid, setpgid) is out
// of reach of a group signal; run tenure in a cgroup (systemd-run --scope,
// a container) when the command does that. Nor are the command's own
// children when the supervisor and the guard die together: Pdeathsig kills
// the command alone, and its group, left without anyone who knows it, is
// then reachable only as a cgroup is (systemd's KillMode=control-group, a
// container's stop). A guard frozen by hand (SIGSTOP) forwards no request
// and enforces no deadline until it is resumed.
package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrDeadline is reported by Start when Command.Deadline had passed by
// the time the guard would have started the command.
var ErrDeadline = errors.New("child: the deadline passed before the command started")

// ErrGuardLost is reported when the guard process died without reporting
// the command's exit (someone killed it); the command's group is then
// killed directly.
var ErrGuardLost = errors.New("child: guard process died")

// Command is what to run.
type Command struct {
	// Path is the program, as found by exec.LookPath.
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Env is the command's whole environment (nil: none).
	Env []string
	// Stdout and Stderr receive the command's output. *os.File values are
	// handed to the command itself, with no copying in between.
	Stdout, Stderr io.Writer
	// Guard is the binary re-executed as the guard. Default /proc/self/exe:
	// this very binary, even if its file was replaced since it started.
	Guard string
	// Deadline, unless zero, is when the guard stops the command on its
	// own — SIGTERM to the group, SIGKILL StopTimeout later — unless
	// Process.SetDeadline moves it first. It holds even while this process
	// is frozen, and counts time the machine spends suspended. A deadline
	// already passed when the guard is ready fails Start with ErrDeadline.
	Deadline time.Time
	// StopTimeout is the time between the guard's own SIGTERM and SIGKILL.
	StopTimeout time.Duration
}

// Exit is how a command ended.
type Exit struct {
	// Code is the exit status, or -1 when the command was killed by a signal.
	Code int
	// Signal is the signal that killed it, or 0.
	Signal syscall.Signal
	// Deadline is set when the guard stopped the command on its own because
	// its deadline passed.
	Deadline bool
}

// ExitCode is Code, or 128+signal for a command killed by a signal (the
// shell's convention).
func (e Exit) ExitCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

func (e Exit) String() string {
	if e.Signal != 0 {
		return "killed by signal " + e.Signal.String()
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// Process is a running command and its guard.
type Process struct {
	guard   *exec.Cmd
	control *os.File // write end; closing it kills the group
	pid     int

	mu       sync.Mutex // serialises writes to control
	termSent bool       // Terminate's SIGTERM went out
	done     chan struct{}
	exit     Exit
	exitErr  error
}

// Start starts c through a guard and returns once the command has started
// (or failed to).
func Start(c Command) (*Process, error) {
	guardPath := c.Guard
	if guardPath == "" {
		guardPath = "/proc/self/exe"
	}
	// An absolute instant: when it is computed does not matter.
	deadline, err := bootDeadline(c.Deadline)
	if err != nil {
		return nil, err
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("child: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		controlR.Close()
		controlW.Close()
		return nil, fmt.Errorf("child: %w", err)
	}
	args := guardArgs{parent: os.Getpid(), deadline: deadline, stopTimeout: c.StopTimeout, path: c.Path, args: c.Args}
	g := exec.Command(guardPath, args.encode()...)
	g.Args[0] = "tenure-guard"
	g.Env = c.Env
	if g.Env == nil {
		g.Env = []string{}
	}
	g.Stdout, g.Stderr = c.Stdout, c.Stderr
	g.ExtraFiles = []*os.File{controlR, statusW}
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// Output copied through a pipe (a Stdout that is not a file) may be
	// held open by a descendant that escaped the group; do not wait for it
	// forever.
	g.WaitDelay = time.Second
	err = g.Start()
	controlR.Close()
	statusW.Close()
	if err != nil {
		controlW.Close()
		statusR.Close()
		return nil, fmt.Errorf("child: start guard %s: %w", guardPath, err)
	}
	p := &Process{guard: g, control: controlW, done: make(chan struct{})}

	status := bufio.NewReader(statusR)
	line, _ := status.ReadString('\n')
	verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	switch verb {
	case "started":
		p.pid, _ = strconv.Atoi(arg)
	case "failed":
		p.finish(statusR, Exit{Code: -1}, nil)
		return nil, fmt.Errorf("child: start %s: %s", c.Path, strings.TrimPrefix(arg, "fork/exec "))
	case "late":
		p.finish(statusR, Exit{Code: -1}, nil)
		return nil, ErrDeadline
	default:
		p.finish(statusR, Exit{Code: -1}, nil)
		return nil, fmt.Errorf("child: start %s: %w", c.Path, ErrGuardLost)
	}
	go p.watch(status, statusR)
	return p, nil
}

// watch waits for the command's exit report and the guard's end.
func (p *Process) watch(status *bufio.Reader, closer io.Closer) {
	line, _ := status.ReadString('\n')
	if f := strings.Fields(line); len(f) >= 3 && f[0] == "exited" {
		code, err1 := strconv.Atoi(f[1])
		sig, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			deadline := len(f) > 3 && f[3] == "deadline"
			p.finish(closer, Exit{Code: code, Signal: syscall.Signal(sig), Deadline: deadline}, nil)
			return
		}
	}
	// The guard died without a report: the group may still run, and only
	// we are left to stop it. Its pid cannot have been reused while members
	// of the group it leads are alive.
	if p.pid > 0 {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	p.finish(closer, Exit{Code: -1, Signal: syscall.SIGKILL}, ErrGuardLost)
}

func (p *Process) finish(closer io.Closer, exit Exit, err error) {
	_ = p.guard.Wait()
	closer.Close()
	p.mu.Lock()
	p.control.Close()
	p.control = nil
	p.exit, p.exitErr = exit, err
	p.mu.Unlock()
	close(p.done)
}

// Pid is the command's pid, which is also its process group id.
func (p *Process) Pid() int { return p.pid }

// Done is closed once the command and its guard have exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit reports how the command ended; call it after Done is closed.
func (p *Process) Exit() (Exit, error) {
	<-p.done
	return p.exit, p.exitErr
}

// Signal sends SIGTERM, SIGINT or SIGKILL to the command's whole group,
// and SIGHUP (a reload) to the command alone, unless it is being stopped.
func (p *Process) Signal(sig syscall.Signal) error {
	var b byte
	switch sig {
	case syscall.SIGTERM:
		b = reqTerm
	case syscall.SIGINT:
		b = reqInt
	case syscall.SIGKILL:
		b = reqKill
	case syscall.SIGHUP:
		b = reqHup
	default:
		return fmt.Errorf("child: signal %v is not forwarded", sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.send([]byte{b})
}

// send writes a request to the guard; p.mu must be held. A request can no
// longer matter once the guard is gone, and is dropped.
func (p *Process) send(msg []byte) error {
	if p.control == nil {
		return nil // already gone
	}
	_, err := p.control.Write(msg)
	if err != nil && errors.Is(err, syscall.EPIPE) {
		return nil // the guard is exiting
	}
	if err != nil {
		return fmt.Errorf("child: request to the guard: %w", err)
	}
	return nil
}

// Terminate sends SIGTERM to the command's group, once: neither a second
// Terminate nor Stop sends another (a command may take a second SIGTERM as
// an order to hurry).
func (p *Process) Terminate() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.termSent {
		return nil
	}
	p.termSent = true
	return p.send([]byte{reqTerm})
}

// SetDeadline moves the deadline the guard enforces on its own (see
// Command.Deadline); the zero time removes it. Once the deadline has
// passed, the guard stops the command whatever comes after.
func (p *Process) SetDeadline(at time.Time) error {
	// Converted before waiting for the lock: the instant is absolute, and
	// the wait must not shift it.
	boot, err := bootDeadline(at)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.send(deadlineMsg(boot))
}

// Stop sends SIGTERM to the group (unless Terminate did), SIGKILL once
// timeout has passed or ctx
// is done, and then waits for the command to be gone, however long that
// takes: a caller that returned earlier could let a peer start while the
// command still runs. (Only a process stuck in the kernel outlives
// SIGKILL; the lease then stays with this replica until it expires.)
func (p *Process) Stop(ctx context.Context, timeout time.Duration) (Exit, error) {
	select {
	case <-p.done:
		return p.Exit()
	default:
	}
	_ = p.Terminate()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.Exit()
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.Signal(syscall.SIGKILL)
	return p.Exit()
}
