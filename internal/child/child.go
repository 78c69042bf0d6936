// Package child runs a command as a supervised child on Linux, so that it
// never outlives the lease it runs under.
//
// The command runs in its own process group, and Stop sends SIGTERM to the
// whole group, then SIGKILL once the stop timeout has passed. Stopping is
// the easy half; the hard half is the supervisor's own death (kill -9, the
// OOM killer, a crash), after which a peer takes the lease while an orphan
// would still be working. Pdeathsig alone does not cover it: it reaches only
// the direct child, not the grandchildren in its group, and it fires when
// the forking *thread* exits rather than the process (golang/go#27505).
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
// The supervisor's requests (SIGTERM, SIGKILL to the group) travel over the
// same pipe, and the guard reports the command's pid and exit status on a
// second one. After the command exits, the guard SIGKILLs whatever it left
// in its group: nothing keeps running unsupervised.
//
// Not covered: a descendant that leaves the group (setsid, setpgid) is out
// of reach of a group signal; run tenure in a cgroup (systemd-run --scope,
// a container) when the command does that. Nor are the command's own
// children when the supervisor and the guard die together: Pdeathsig kills
// the command alone, and its group, left without anyone who knows it, is
// then reachable only as a cgroup is (systemd's KillMode=control-group, a
// container's stop).
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
}

// Exit is how a command ended.
type Exit struct {
	// Code is the exit status, or -1 when the command was killed by a signal.
	Code int
	// Signal is the signal that killed it, or 0.
	Signal syscall.Signal
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

	mu      sync.Mutex // serialises writes to control
	done    chan struct{}
	exit    Exit
	exitErr error
}

// Start starts c through a guard and returns once the command has started
// (or failed to).
func Start(c Command) (*Process, error) {
	guardPath := c.Guard
	if guardPath == "" {
		guardPath = "/proc/self/exe"
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
	g := exec.Command(guardPath, append([]string{GuardArg, strconv.Itoa(os.Getpid()), c.Path}, c.Args...)...)
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
	verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	if verb == "exited" {
		var code, sig int
		if _, err := fmt.Sscanf(arg, "%d %d", &code, &sig); err == nil {
			p.finish(closer, Exit{Code: code, Signal: syscall.Signal(sig)}, nil)
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

// Signal sends SIGTERM, SIGINT or SIGKILL to the command's whole group.
func (p *Process) Signal(sig syscall.Signal) error {
	var b byte
	switch sig {
	case syscall.SIGTERM:
		b = reqTerm
	case syscall.SIGINT:
		b = reqInt
	case syscall.SIGKILL:
		b = reqKill
	default:
		return fmt.Errorf("child: signal %v is not forwarded", sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.control == nil {
		return nil // already gone
	}
	_, err := p.control.Write([]byte{b})
	if err != nil && errors.Is(err, syscall.EPIPE) {
		return nil // the guard is exiting
	}
	return err
}

// Stop sends SIGTERM to the group, SIGKILL once timeout has passed or ctx
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
	_ = p.Signal(syscall.SIGTERM)
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
