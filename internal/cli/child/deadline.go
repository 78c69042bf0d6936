package child

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Deadlines cross the process boundary as absolute CLOCK_BOOTTIME
// instants in nanoseconds: one clock every process on the host shares
// (a duration would age unseen while the message waits in the pipe), and
// one that keeps running while the machine is suspended (CLOCK_MONOTONIC,
// which Go's timers use, stops; a suspended holder's peers do not).
// noDeadline, 0, means the guard enforces none.
const noDeadline int64 = 0

// bootNow reads CLOCK_BOOTTIME.
func bootNow() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("child: read CLOCK_BOOTTIME: %w", err)
	}
	return ts.Nano(), nil
}

// bootDeadline converts at, a time.Time compared with time.Now (on its
// monotonic reading when it has one), to a CLOCK_BOOTTIME instant. Both
// clocks are read together, so only the conversion's own few hundred
// nanoseconds can shift it. The zero time means no deadline.
func bootDeadline(at time.Time) (int64, error) {
	if at.IsZero() {
		return noDeadline, nil
	}
	now, err := bootNow()
	if err != nil {
		return 0, err
	}
	until := time.Until(at)
	switch {
	case until > 0 && int64(until) > math.MaxInt64-now:
		return math.MaxInt64, nil
	case now+int64(until) <= noDeadline:
		return 1, nil // long passed; 0 would mean none
	}
	return now + int64(until), nil
}

// deadlineMsgLen is the length of a deadline request: reqDeadline, then
// the instant as a big-endian int64.
const deadlineMsgLen = 1 + 8

func deadlineMsg(boot int64) []byte {
	b := make([]byte, deadlineMsgLen)
	b[0] = reqDeadline
	binary.BigEndian.PutUint64(b[1:], uint64(boot))
	return b
}

// bootTimer is a timerfd on CLOCK_BOOTTIME armed at absolute instants:
// re-armed for each new deadline, it fires at once when the deadline
// passed while the machine slept, and nothing another process does
// (short of killing the guard) can delay it.
type bootTimer struct {
	fd   int
	file *os.File // the same fd, read through Go's poller
}

func newBootTimer() (*bootTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("child: timerfd on CLOCK_BOOTTIME: %w", err)
	}
	return &bootTimer{fd: fd, file: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// set arms the timer for the instant boot, or disarms it for noDeadline.
// An instant already passed fires at once.
func (t *bootTimer) set(boot int64) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(boot)}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return fmt.Errorf("child: arm timerfd: %w", err)
	}
	return nil
}

// wait blocks until the timer fires. A firing may be stale (for an instant
// since replaced): the caller compares the clock with its deadline.
func (t *bootTimer) wait() error {
	var buf [8]byte
	_, err := t.file.Read(buf[:])
	return err
}
