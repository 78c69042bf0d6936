package tenure

import "time"

// Observer receives what a Supervisor does, for metrics. Pass one in
// Config.Observer; package github.com/tenure-dev/tenure/metrics has a
// Prometheus collector that is one. Methods are called from the
// supervisor's goroutines, also from a runner's deadline watchdog: each
// must be safe for concurrent use, return at once and never call back
// into the Supervisor. Embed NopObserver to implement only some.
type Observer interface {
	// LeasesHeld is how many leases this supervisor holds, after each
	// renewal and release.
	LeasesHeld(n int)
	// Renewal is one lease's renewal outcome: "renewed", "lost" or
	// "unconfirmed".
	Renewal(outcome string)
	// RenewalCall is how long one batched renewal of every lease took,
	// confirmed or not.
	RenewalCall(d time.Duration)
	// Acquired: a new term was acquired.
	Acquired()
	// Lost: a lease was lost (the store refused it).
	Lost()
	// DeadlineStop: a runner was stopped at its lease's safety deadline.
	DeadlineStop()
	// Released: a lease was released (a graceful handoff).
	Released()
	// RunnerStarted: a runner started; restart after a failure.
	RunnerStarted(restart bool)
	// RunnerFailed: a runner failed to start, or returned while holding
	// its lease.
	RunnerFailed()
	// Round is how long one supervision round took (acquisitions, a read
	// of the lease table, pool plans; not renewals).
	Round(d time.Duration)
	// Handoff is the time from acquiring a new term to its runner starting.
	Handoff(d time.Duration)
	// PoolHandover: a pool key was given back to rebalance the pool.
	PoolHandover()
	// CrashLoop: a key's runner failed MaxFailures times within
	// FailureWindow, and the key was handed over for a cooldown.
	CrashLoop()
}

// NopObserver observes nothing. Embed it in an Observer that implements
// only some methods, so it keeps compiling when Observer grows.
type NopObserver struct{}

func (NopObserver) LeasesHeld(int)            {}
func (NopObserver) Renewal(string)            {}
func (NopObserver) RenewalCall(time.Duration) {}
func (NopObserver) Acquired()                 {}
func (NopObserver) Lost()                     {}
func (NopObserver) DeadlineStop()             {}
func (NopObserver) Released()                 {}
func (NopObserver) RunnerStarted(bool)        {}
func (NopObserver) RunnerFailed()             {}
func (NopObserver) Round(time.Duration)       {}
func (NopObserver) Handoff(time.Duration)     {}
func (NopObserver) PoolHandover()             {}
func (NopObserver) CrashLoop()                {}
