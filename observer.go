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
	// Handover: a lease this replica held has left it, for cause, one of
	// the Handover* constants.
	Handover(cause string)
	// DeadlineStop: a runner was stopped at its lease's safety deadline.
	DeadlineStop()
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
	// Keys is, after every round, each singleton key configured here
	// (Set; pool keys are counted per pool in Pools) and its state, in no
	// set order (sorting 10,000 keys would take a round's whole budget).
	Keys(keys []KeyState)
	// Pools is, after every round, how many keys of each pool this
	// replica holds.
	Pools(held map[string]int)
	// PoolSources is, after every round, each pool's key source as this
	// replica last read it, and whether the replica takes part in the
	// pool; in no set order. Once Run has returned, every field but the
	// pool's name is zero.
	PoolSources(sources []PoolSource)
	// LogRecordsDropped: n log records were dropped because the
	// Config.Logger's handler did not take them as fast as they came
	// (it blocked, or fell behind a burst). Work never waits for the log
	// handler. Called as records are dropped, from the goroutine that
	// logged them; a record saying how many follows once the handler
	// takes records again.
	LogRecordsDropped(n int)
}

// The causes Observer.Handover reports.
const (
	HandoverReleased  = "released"   // given back: shutdown, Remove, Disabled, ErrDone
	HandoverRebalance = "rebalance"  // a pool gave the key to another replica
	HandoverCrashLoop = "crash-loop" // its runner kept failing here (Config.MaxFailures)
	HandoverLost      = "lost"       // the store refused a renewal: taken or revoked
	HandoverExpired   = "expired"    // its term ran out unrenewed (the store was unreachable)
)

// KeyState is a singleton key's state on this replica, for metrics.
type KeyState struct {
	Key     string
	Held    bool // this replica holds the key's lease
	Running bool // its runner runs here
}

// PoolSource is one pool's key source on this replica, for metrics.
type PoolSource struct {
	Pool string
	// Keys is how many keys the last good read of the source listed.
	Keys int
	// Failing: the latest read failed or timed out. The last good read's
	// keys stay in force.
	Failing bool
	// Member: this replica holds its membership lease, so it takes part
	// in the pool. It joins only once it has read the pool's keys, so a
	// replica whose source never answers stays out, and no peer lists it:
	// this is where it shows.
	Member bool
}

// NopObserver observes nothing. Embed it in an Observer that implements
// only some methods, so it keeps compiling when Observer grows.
type NopObserver struct{}

func (NopObserver) LeasesHeld(int)            {}
func (NopObserver) Renewal(string)            {}
func (NopObserver) RenewalCall(time.Duration) {}
func (NopObserver) Acquired()                 {}
func (NopObserver) Handover(string)           {}
func (NopObserver) DeadlineStop()             {}
func (NopObserver) RunnerStarted(bool)        {}
func (NopObserver) RunnerFailed()             {}
func (NopObserver) Round(time.Duration)       {}
func (NopObserver) Handoff(time.Duration)     {}
func (NopObserver) Keys([]KeyState)           {}
func (NopObserver) Pools(map[string]int)      {}
func (NopObserver) PoolSources([]PoolSource)  {}
func (NopObserver) LogRecordsDropped(int)     {}
