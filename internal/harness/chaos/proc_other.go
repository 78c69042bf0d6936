//go:build !linux

package chaos

import (
	"errors"
	"syscall"
	"time"
)

// supported reports whether this platform can run the harness: it reads
// /proc and relies on Pdeathsig, both Linux-only.
const supported = false

var errUnsupported = errors.New("chaos: the fault-injection harness runs on Linux only")

// Now is a monotonic clock reading in nanoseconds. Off Linux it is not
// shared between processes; the harness does not run there.
func Now() int64 { return time.Since(processStart).Nanoseconds() + 1 }

var processStart = time.Now()

func replicaAttr() *syscall.SysProcAttr { return nil }

func signalProcess(int, syscall.Signal) error { return errUnsupported }

func awaitStopped(int, time.Duration) error { return errUnsupported }

// Signals the harness would send; never used off Linux.
const (
	sigKill = syscall.Signal(9)
	sigTerm = syscall.Signal(15)
	sigStop = syscall.Signal(19)
	sigCont = syscall.Signal(18)

	sigStallLog  = syscall.Signal(10)
	sigResumeLog = syscall.Signal(12)
)
