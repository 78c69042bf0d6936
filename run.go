package tenure

import (
	"context"
	"errors"
	"sync"
	"time"
)

// runState is one live runner. Its stop cause, stop time and watchdog have
// a lock of their own, so the deadline path — the watchdog cancelling the
// runner — never waits on the supervisor's lock, on logging or on the
// supervision loop.
type runState struct {
	key     string // the lease key (lease.Key is the pool's own key for pool keys)
	lease   Lease
	leased  bool          // runs under a lease (false: Everywhere or single-instance)
	ended   bool          // the runner has returned; guarded by mu
	slot    int32         // the run's place among the watchdogs due (watchdogs.mu guards it, and due)
	due     time.Duration // when its place there comes due, since watchdogs.base: armedFor, or earlier
	cancel  context.CancelCauseFunc
	done    chan struct{}
	started time.Time
	dogs    *watchdogs // where the watchdog is set

	mu       sync.Mutex
	cause    error     // why it was stopped, nil while running normally
	armedFor time.Time // when the watchdog is set to fire, on time.Now's clock: written under mu and watchdogs.mu, read under either
	stopAt   time.Time // when the watchdog cancels the runner, on time.Now's clock
	// changed is closed when stopAt changes, the run stops or it ends; made
	// only when StopAt hands it out, so that a renewal of 10,000 keys nobody
	// watches allocates no channels.
	changed chan struct{}
}

// keepsLease reports whether a run stopped for cause still holds its
// lease until the runner returns: a graceful stop (shutdown, removal,
// rebalance, restart, pause, move) keeps renewing it, so its deadline
// keeps moving while the runner winds down; a lost lease or a deadline
// does not.
func keepsLease(cause error) bool {
	switch cause {
	case ErrStopping, ErrKeyRemoved, ErrRebalance, ErrRestart, ErrPaused, ErrMoved:
		return true
	}
	return false
}

func newRunState(key string, lease Lease, leased bool, cancel context.CancelCauseFunc, dogs *watchdogs) *runState {
	r := &runState{key: key, lease: lease, leased: leased, cancel: cancel, done: make(chan struct{}), started: time.Now(), dogs: dogs, slot: -1}
	if leased {
		r.lease.run = r
	}
	return r
}

// errReturned marks a run whose runner returned before anything stopped it.
var errReturned = errors.New("tenure: runner returned")

// stop cancels the runner with cause; the first cause wins. It reports
// whether this call stopped it.
func (r *runState) stop(cause error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return false
	}
	r.cause = cause
	if cause == errReturned {
		cause = nil // context.Canceled, for anything the runner left behind
	}
	// Cancel before signalling StopAt's watchers, so that one woken by
	// the signal finds the context already done, and before taking the
	// watchdog off, which waits for the watchdogs' lock.
	r.cancel(cause)
	r.signal()
	r.dogs.remove(r)
	return true
}

// end records that the runner has returned: StopAt reports ok=false.
func (r *runState) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	r.signal()
}

// signal wakes StopAt's watchers; r.mu must be held.
func (r *runState) signal() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

func (r *runState) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause != nil
}

func (r *runState) stopCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// deadline is what Lease.StopAt reports.
func (r *runState) deadline() (time.Time, <-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.stopAt, r.changed, !r.ended && (r.cause == nil || keepsLease(r.cause))
}

// guard arms (or re-arms) the runner's watchdog from its term as the
// keeper holds it now: the runner is cancelled the moment the keeper stops
// holding the term, independent of the supervision loop, which may be busy
// in a store call, and of the supervisor's lock, which a blocked log
// handler may hold. Call it after every confirmed renewal.
func (s *Supervisor) guard(r *runState, clk loopClock) {
	t, ok := s.keeper.Term(r.key)
	if !ok || t.Epoch != r.lease.Epoch {
		r.stop(ErrLeaseLost)
		return
	}
	at := t.StopAt(s.keeper.Timing())
	r.mu.Lock()
	defer r.mu.Unlock()
	// The keeper's clock runs ahead of time.Now by the time the host has
	// slept; runners compare StopAt with time.Now. The slept time is the
	// most any reading has seen, read under r.mu: clk may have been read
	// before a suspend that watchSuspend has since seen and guarded this
	// run for, and must not move the deadline back later.
	slept := max(clk.slept, time.Duration(s.sleptSeen.Load()))
	local := at.Add(-slept)
	now := time.Now()
	if r.ended || r.cause != nil && !keepsLease(r.cause) {
		return
	}
	if !local.Equal(r.stopAt) {
		r.stopAt = local
		r.signal()
	}
	if r.cause != nil {
		return // winding down: the deadline moves for what the runner handed on; the context is done already
	}
	// A renewal moves every watchdog later, which only records the new
	// time (watchdogs.set): the cost of a renewal at 10,000 keys was
	// mostly resetting a timer per key. A deadline moved earlier (the host
	// slept) moves the watchdog at once, so it is never late.
	r.dogs.set(r, local, now)
}

// watchdogsFired cancels each runner that came due unless a renewal was
// confirmed meanwhile, and reports the ones it stopped only once it has
// stopped them all: a report (an Observer, a log call) may block.
func (s *Supervisor) watchdogsFired(due []*runState) {
	var stopped []*runState
	clk := s.loopClock()
	for _, r := range due {
		if s.watchdogFired(r, clk) {
			stopped = append(stopped, r)
		}
	}
	for _, r := range stopped {
		s.obs.DeadlineStop()
		s.log.Warn("stopped runner: no renewal confirmed before the lease's safety deadline", "key", r.key, "epoch", r.lease.Epoch)
	}
}

// watchdogFired cancels r's runner unless a renewal was confirmed
// meanwhile, and reports whether its deadline stopped it.
func (s *Supervisor) watchdogFired(r *runState, clk loopClock) bool {
	if s.keeper.HoldsTerm(r.key, r.lease.Epoch) {
		s.guard(r, clk) // renewed meanwhile
		return false
	}
	if t, held := s.keeper.Term(r.key); !held || t.Epoch != r.lease.Epoch {
		r.stop(ErrLeaseLost)
		return false
	}
	return r.stop(ErrDeadline)
}

// StopAt reports when the runner's context will be cancelled unless a
// renewal is confirmed first, and a channel that is closed when that time
// moves (a renewal was confirmed) or the run is stopped; then call StopAt
// again. ok is false once the lease is lost or past its deadline, once the
// runner has returned, and for a run that no lease guards (Everywhere,
// single-instance mode, or a Lease not handed out by a Supervisor); while
// ok is true, at is never zero. A graceful stop (shutdown, removal,
// rebalance, restart, pause, move) keeps the lease renewed until the
// runner returns, so at keeps moving after the context is done: what the
// runner handed on may take its time to stop, and is not cut short. If
// the lease is lost or its deadline passes during such a stop, ok stays
// true and at stops moving: at is then the last deadline a renewal
// confirmed, which what was handed on must still keep.
//
// A runner that hands the work to something the supervisor cannot cancel
// — another process, a remote job — passes each StopAt on, so that the
// work stops on time even when this process is frozen or starved: this is
// how `tenure run` lets its guard process stop the command on its own.
func (l Lease) StopAt() (at time.Time, changed <-chan struct{}, ok bool) {
	if l.run == nil {
		return time.Time{}, nil, false
	}
	return l.run.deadline()
}
