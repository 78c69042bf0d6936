package tenure

import "time"

// StageSuspend makes s see the host as having slept for whatever f
// reports, as clock.Suspended would after a real suspend. Call it before
// Run.
func StageSuspend(s *Supervisor, f func() time.Duration) { s.suspended = f }
