package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// gapAtStart is CLOCK_BOOTTIME − CLOCK_MONOTONIC when the process started:
// the host's suspended time until then, which is not ours to count.
var gapAtStart = gap()

// gap is CLOCK_BOOTTIME − CLOCK_MONOTONIC: the time the host has spent
// suspended since it booted.
func gap() time.Duration {
	var boot, mono unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil || unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil {
		return 0
	}
	return time.Duration(boot.Nano() - mono.Nano())
}

func sinceStart() time.Duration { return gap() - gapAtStart }
