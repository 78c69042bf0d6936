// Package clock reads local time on a clock that keeps running while the
// host is suspended.
//
// Go's monotonic clock (CLOCK_MONOTONIC on Linux) stops while the machine
// or VM sleeps, and so do timers measured on it: a lease deadline 5 s away
// when the host was suspended is still 5 s away when it resumes an hour
// later, although the store — on another host — let the lease expire long
// ago and a peer took over. The fail-closed rule must count that time.
// [Now] does: it is time.Now() moved forward by the time the host has
// spent suspended since this process started, which is what
// CLOCK_BOOTTIME adds to CLOCK_MONOTONIC on Linux. Elsewhere no suspend is
// detected and Now is time.Now().
package clock

import (
	"sync/atomic"
	"time"
)

// Now returns time.Now() moved forward by Suspended(). Its readings keep
// Go's monotonic component, so differences between them are immune to
// wall-clock steps, and they include the time the host was suspended.
func Now() time.Time { return time.Now().Add(Suspended()) }

// Suspended reports how long the host has been suspended since this
// process started. It never decreases. Differences below MinSuspend are
// read as none, so that the jitter of reading two clocks one after the
// other never moves a deadline.
func Suspended() time.Duration {
	d := sinceStart()
	if d < MinSuspend {
		d = 0
	}
	for {
		seen := maxSeen.Load()
		if int64(d) <= seen {
			return time.Duration(seen)
		}
		if maxSeen.CompareAndSwap(seen, int64(d)) {
			return d
		}
	}
}

// MinSuspend is the shortest suspend Suspended reports.
const MinSuspend = 10 * time.Millisecond

var maxSeen atomic.Int64
