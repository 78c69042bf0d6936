//go:build linux

package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// supported reports whether this platform can run the harness.
const supported = true

// Now is the host's CLOCK_MONOTONIC in nanoseconds. Unlike Go's own
// monotonic reading, it means the same in every process on the host, so
// the records of several replicas and of the harness can be compared.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("chaos: CLOCK_MONOTONIC: %v", err))
	}
	return ts.Nano()
}

// replicaAttr puts a replica in its own process group, so a terminal's
// Ctrl-C reaches only the harness (which stops the replicas in order), and
// has the kernel kill it if the harness dies first.
func replicaAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalProcess(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("chaos: signal %v to %d: %w", sig, pid, err)
	}
	return nil
}

// awaitStopped waits until every thread of pid is in the stopped state, so
// the pause the harness records starts no earlier than the real one.
func awaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if allStopped(pid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: process %d not stopped after %v", pid, timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			return false
		}
		// The state follows the command name's closing parenthesis.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return false
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}

// Signals the harness sends.
const (
	sigKill = syscall.SIGKILL
	sigTerm = syscall.SIGTERM
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
	// The log-stall fault: a replica's log sink blocks from the first
	// signal until the second (see logGate).
	sigStallLog  = syscall.SIGUSR1
	sigResumeLog = syscall.SIGUSR2
)
