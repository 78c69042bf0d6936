package tenure

import (
	"context"
	"time"
)

// StageSuspend makes s see the host as having slept for whatever f
// reports, as clock.Suspended would after a real suspend. Call it before
// Run.
func StageSuspend(s *Supervisor, f func() time.Duration) { s.suspended = f }

// RenewOnce runs one renewal of every lease s holds, as its renewal loop
// does each period, and reports whether the store confirmed it.
func RenewOnce(s *Supervisor, ctx context.Context) bool { return s.renew(ctx) }
