package tenure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// phase is where one key's runner stands on this replica:
//
//	idle ──start──▶ starting ──fence passed──▶ running ──cancel──▶ stopping
//	 ▲ ▲                │                                             │
//	 │ └─fence refused──┘                                             │
//	 │ └─────────────────────────── returned ─────────────────────────┘
//	 └─released── releasing ◀──lease held, no longer wanted── idle
//
// A start and a release begin only from idle: never while the runner of
// the last term is winding down, nor while its lease is being handed
// back. starting and releasing are actions in flight (keyState.pending);
// running and stopping follow the run itself, whose watchdog may cancel
// it without the supervisor's lock.
type phase uint8

const (
	idle      phase = iota // no runner and nothing in flight
	starting               // a start action is in flight: reload, the fence, the runner
	running                // the runner is live
	stopping               // the runner was cancelled and has not returned
	releasing              // the lease is being handed back
)

// intent is what the operator wants of a key.
type intent uint8

const (
	wanted   intent = iota // configured and enabled: run it, lease permitting
	disabled               // configured with Job.Disabled: stopped, lease released
	finished               // its runner returned ErrDone: stopped until Set again
	paused                 // paused cluster-wide (Pause): stopped, released, until Resume
	moved                  // moved away (Move): stopped, released, out until the move ends
	cooling                // handed over after a crash loop: not wanted here for a cooldown
	removed                // Remove, or gone from its pool's source: release and forget
)

// keyState is the supervisor's record of one key. Guarded by Supervisor.mu.
type keyState struct {
	key        string
	job        *Job     // shared by a pool's keys: replaced, never written to
	configured bool     // false once removed; the record lives on until released
	done       bool     // the runner returned ErrDone: finished until Set again
	ctl        controls // the operator's records in the store (Pause, Move)

	run     *runState // the runner of the running or stopping phase, else nil
	pending phase     // starting or releasing while that action is in flight, else idle

	termStart
	fails       *failureLog   // nil until the first failure (failed, failures)
	nextAcquire time.Time     // no acquisition attempt before this
	restart     bool          // start again at once when the runner returns
	removed     chan struct{} // closed when a removal has finished

	poolRole
}

// termStart is what the key keeps of its current term's beginning.
type termStart struct {
	newTerm    bool      // a new term began: Reload before the next start
	acquiredAt time.Time // when the current term was acquired, until its runner starts
	heldSince  time.Time // when the current term was acquired
}

// poolRole is the part a pool gives a key: none for a singleton.
type poolRole struct {
	pool    *poolState // the pool that manages this key, if any
	poolKey string     // for pool keys: the key as the pool's source gives it
	member  *poolState // for a pool membership lease: its pool
	claim   bool       // for pool keys: the policy wants this key held here
}

// failureLog is a key's record of failed runs: the backoff before the
// next start, and the crash-loop check that hands the key to a peer.
type failureLog struct {
	count     int         // consecutive runs that ended while held
	last      error       // the last failure
	retryAt   time.Time   // no start before this (backoff)
	recent    []time.Time // failures within the crash-loop window
	coolUntil time.Time   // handed over after a crash loop: not wanted here before this
}

// failed is the key's record of failed runs, empty for a key that has not
// failed.
func (ks *keyState) failed() failureLog {
	if ks.fails == nil {
		return failureLog{}
	}
	return *ks.fails
}

// failures is the key's record of failed runs for writing, made at its
// first failure: most keys never fail, and a record in each was 96 of the
// bytes every key of a 100,000-key pool costs.
func (ks *keyState) failures() *failureLog {
	if ks.fails == nil {
		ks.fails = new(failureLog)
	}
	return ks.fails
}

// phase is the key's phase now.
func (ks *keyState) phase() phase {
	switch {
	case ks.run != nil && ks.run.stopped():
		return stopping
	case ks.run != nil:
		return running
	}
	return ks.pending
}

// intent is what the operator wants of the key.
func (ks *keyState) intent() intent {
	switch {
	case !ks.configured:
		return removed
	case ks.done:
		return finished
	case ks.job.Disabled:
		return disabled
	case ks.ctl.paused:
		return paused
	case ks.ctl.moved:
		return moved
	case ks.fails != nil && !ks.fails.coolUntil.IsZero() && time.Now().Before(ks.fails.coolUntil):
		// The clock is read only for a key that has cooled: a round asks
		// every key's intent several times, and at 10,000 keys reading
		// the clock each time was a third of the round.
		return cooling
	}
	return wanted
}

// wantsRun: the key should have a runner here, lease permitting.
func (ks *keyState) wantsRun() bool { return ks.intent() == wanted }

// wantsLease: the key should be acquired by this replica. A pool's
// membership waits until the pool's keys have been read once: a replica
// that cannot read them (a command missing on its host, a database it
// cannot reach) can run none of them, and as a member it took a share,
// so that its peers stopped at their caps and part of the pool ran
// nowhere.
func (ks *keyState) wantsLease() bool {
	return ks.wantsRun() && ks.job.Mode == Exclusive && (ks.pool == nil || ks.claim) &&
		(ks.member == nil || ks.member.coord.Loaded())
}

// reconcile compares every key's wanted state with what runs, and
// schedules start and stop actions; it never blocks on a store or runner.
//
// The clock is read once for the pass: a lease whose deadline passes
// during it is still seen as held, for at most the pass's few
// milliseconds, which is safe because nothing here is what stops a run on
// time (each run's watchdog does, on the watchdogs' timer) and a start reads the
// clock afresh before the runner begins.
func (s *Supervisor) reconcile() {
	s.mu.Lock()
	defer s.unlock()
	if s.stopping || !s.active {
		return
	}
	now := time.Now()
	keeperNow := s.loopClock().at(now)
	for _, ks := range s.keys {
		s.reconcileKey(ks, now, keeperNow)
	}
}

// reconcileKey acts on what ks's state asks for at local time now (and
// keeperNow on the keeper's clock). Its checks of the lease sort keys; a
// runner starts only if start, reading the clock afresh, finds the lease
// still held.
func (s *Supervisor) reconcileKey(ks *keyState, now, keeperNow time.Time) {
	if s.keys[ks.key] != ks {
		// A record forgotten while an action of its was in flight: the
		// key's lease, if held, now belongs to the key's current record.
		return
	}
	switch ks.phase() {
	case running, stopping:
		s.reconcileRun(ks, keeperNow)
	case idle:
		s.reconcileIdle(ks, now, keeperNow)
	case starting, releasing:
		// Wait for the action in flight: a release reconciles the key when
		// it ends; a start the fence refused is looked at again by the
		// loop's next pass (poked by whatever changed).
	}
}

// reconcileKeyNow reconciles one key, reading the clock for it.
func (s *Supervisor) reconcileKeyNow(ks *keyState) {
	now := time.Now()
	s.reconcileKey(ks, now, s.loopClock().at(now))
}

// reconcileRun stops a run that must not go on: the key is no longer
// wanted here, its pool gave it away, its mode changed, or its lease is
// no longer held.
func (s *Supervisor) reconcileRun(ks *keyState, keeperNow time.Time) {
	leased := s.leased && ks.job.Mode == Exclusive
	switch {
	case ks.intent() == paused:
		ks.run.stop(ErrPaused)
	case ks.intent() == moved:
		ks.run.stop(ErrMoved)
	case !ks.wantsRun():
		ks.run.stop(ErrKeyRemoved)
	case ks.pool != nil && !ks.claim:
		ks.run.stop(ErrRebalance)
	case leased != ks.run.leased:
		ks.run.stop(ErrRestart) // mode changed
	case leased && !s.keeper.HoldsAt(ks.key, keeperNow):
		if t, ok := s.keeper.Term(ks.key); ok && t.Epoch == ks.run.lease.Epoch {
			ks.run.stop(ErrDeadline)
		} else {
			ks.run.stop(ErrLeaseLost)
		}
	}
}

// reconcileIdle hands back a lease no runner uses and nobody wants,
// finishes a removal, or starts the runner.
func (s *Supervisor) reconcileIdle(ks *keyState, now, keeperNow time.Time) {
	if s.leased && !ks.wantsLease() {
		// Removed, disabled, paused, cooling or turned Everywhere: hand
		// the lease back now that no runner uses it.
		if t, ok := s.keeper.Term(ks.key); ok {
			ks.pending = releasing
			cause := HandoverReleased
			switch {
			case ks.intent() == cooling:
				cause = HandoverCrashLoop
			case ks.pool != nil && ks.configured && !ks.claim:
				cause = HandoverRebalance
			}
			s.actions.Go(func() { s.release(ks, t.Epoch, cause) })
			return
		}
	}
	if !ks.wantsRun() || ks.pool != nil && !ks.claim {
		s.finishRemoval(ks)
		return
	}
	leased := s.leased && ks.job.Mode == Exclusive
	if !now.Before(ks.failed().retryAt) && (!leased || s.keeper.HoldsAt(ks.key, keeperNow)) {
		ks.pending = starting
		s.actions.Go(func() { s.start(ks.key) })
	}
}

func (s *Supervisor) finishRemoval(ks *keyState) {
	if ks.configured {
		return
	}
	if s.keys[ks.key] == ks {
		delete(s.keys, ks.key)
	}
	if ks.removed != nil {
		close(ks.removed)
		ks.removed = nil
	}
}

// retryReleases sends again the releases that failed, so a key given up
// on purpose reaches a peer as soon as the store answers, not a TTL and a
// grace later (and a peer that follows the push channel hears of it).
func (s *Supervisor) retryReleases(ctx context.Context) {
	if s.keeper.Unreleased() == 0 {
		return
	}
	released, err := s.keeper.RetryReleases(ctx)
	s.storeAnswered(err)
	if err != nil {
		s.log.Debug("could not release leases again; retrying next round", "err", err)
	}
	for _, t := range released {
		s.log.Info("released lease on a retry", "key", t.Key, "epoch", t.Epoch)
	}
}

// release ends one term, for cause (a Handover* constant), and finishes
// the key's removal if it was removed.
func (s *Supervisor) release(ks *keyState, epoch int64, cause string) {
	key := ks.key
	if t, ok := s.keeper.Term(key); ok && t.Epoch == epoch {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		if err := s.keeper.Release(ctx, t); err != nil {
			s.log.Warn("could not release lease; retrying each round until its term ends", "key", key, "epoch", epoch, "err", err)
		} else {
			s.log.Info("released lease", "key", key, "epoch", epoch)
			s.obs.Handover(cause)
		}
		cancel()
	}
	s.mu.Lock()
	defer s.unlock()
	ks.pending = idle
	s.reconcileKeyNow(ks)
}

// start launches the key's runner if, after an optional reload, the lease
// is still held: no path starts a runner on a non-holder.
func (s *Supervisor) start(key string) {
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil {
		s.unlock()
		return
	}
	job, reload := *ks.job, ks.newTerm && ks.job.Reload != nil || ks.job.Runner == nil
	// Every start of a singleton key reads its pause and move records
	// straight from the store, last thing before the fence: the last read
	// of the table may predate a pause or a move — a new term, a restart
	// after a failure, a key just Set — and a Reload may take a while.
	checkControls := s.leased && ks.pool == nil && ks.member == nil
	s.unlock()

	runner := job.Runner
	var err error
	if reload {
		runner, err = s.reload(job, key)
	}
	var ctl controls
	var ctlErr error
	if checkControls && err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		ctl, ctlErr = s.readControls(ctx, key)
		cancel()
	}
	barred := ctl.paused || ctl.moved

	s.mu.Lock()
	defer s.unlock()
	ks.pending = idle
	if s.keys[key] != ks {
		return
	}
	switch {
	case ctlErr != nil:
		ks.failures().retryAt = time.Now().Add(s.cfg.RenewEvery)
		s.logLocked(slog.LevelWarn, "runner not started: could not read the key's pause and move records; trying again in a round", "key", key, "err", ctlErr)
		return
	case barred:
		ks.ctl = ctl // reconcile releases the lease
		s.poke()
		return
	case err != nil:
		s.startFailed(ks, fmt.Errorf("reload: %w", err))
		return
	}
	if job.Schedule != nil && s.leased {
		runner = scheduledRunner{s: s, sched: job.Schedule.p, noRetry: job.NoRetry, inner: runner}
	}
	if err := s.startLocked(ks, runner); err != nil {
		s.logLocked(slog.LevelDebug, "runner not started", "key", key, "reason", err)
		s.poke() // whatever refused it (a removal, a lost lease) wants the loop now
	}
}

func (s *Supervisor) reload(job Job, key string) (Runner, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StopTimeout+s.cfg.TTL)
	defer cancel()
	r, err := job.Reload(ctx, key)
	if err == nil && r == nil {
		err = fmt.Errorf("the Reload hook returned no runner: %w", ErrConfig)
	}
	return r, err
}

// startLocked is the fence: it checks, under the lock, that the key should
// run here and that its lease is held, then launches the runner.
func (s *Supervisor) startLocked(ks *keyState, runner Runner) error {
	if s.stopping || !s.active {
		return ErrNotRunning
	}
	if !ks.wantsRun() {
		return ErrKeyRemoved
	}
	if ks.run != nil {
		return nil // already running
	}
	leased := s.leased && ks.job.Mode == Exclusive
	lease := Lease{Key: ks.key, FenceKey: ks.key, Owner: s.owner}
	if ks.pool != nil {
		lease.Key = ks.poolKey // the runner works on the source's key
	}
	if leased {
		t, ok := s.keeper.Term(ks.key)
		if !ok || !s.keeper.Holds(ks.key) {
			return ErrLeaseLost
		}
		lease.Epoch = t.Epoch
	}
	ks.newTerm = false
	if !ks.acquiredAt.IsZero() {
		took := time.Since(ks.acquiredAt)
		s.observeLocked(func(o Observer) { o.Handoff(took) })
		ks.acquiredAt = time.Time{}
	}
	ctx, cancel := context.WithCancelCause(s.runCtx)
	r := newRunState(ks.key, lease, leased, cancel, s.dogs)
	ks.run = r
	if leased {
		s.guard(r, s.loopClock())
	}
	restart := ks.failed().count > 0
	s.observeLocked(func(o Observer) { o.RunnerStarted(restart) })
	s.logLocked(slog.LevelInfo, "runner started", "key", ks.key, "epoch", lease.Epoch)
	s.actions.Go(func() { s.runRunner(ctx, ks, r, runner) })
	return nil
}

// runRunner runs one runner and handles its return.
func (s *Supervisor) runRunner(ctx context.Context, ks *keyState, r *runState, runner Runner) {
	// Check the lease once more on the runner's own goroutine: if the
	// process was frozen between the start decision and here, the lease may
	// be gone, and the runner must not begin at all.
	if r.leased && !s.keeper.HoldsTerm(r.key, r.lease.Epoch) {
		r.stop(ErrDeadline)
	}
	var err error
	if ctx.Err() == nil {
		err = runSafely(ctx, runner, r.lease)
	}
	returned := r.stop(errReturned)
	r.end()

	s.mu.Lock()
	defer s.unlock()
	defer close(r.done)
	if ks.run == r {
		ks.run = nil
	}
	ranFor := time.Since(r.started)
	switch {
	case !returned:
		s.logLocked(slog.LevelInfo, "runner stopped", "key", ks.key, "epoch", r.lease.Epoch, "cause", r.stopCause())
		if ks.restart {
			ks.restart = false
			if ks.fails != nil {
				ks.fails.retryAt = time.Time{}
			}
		}
	case errors.Is(err, ErrDone):
		s.logLocked(slog.LevelInfo, "runner finished; releasing its lease", "key", ks.key, "epoch", r.lease.Epoch)
		ks.done = true
		if ks.fails != nil {
			ks.fails.count, ks.fails.last = 0, nil
		}
	default:
		if ranFor >= s.cfg.BackoffMax && ks.fails != nil {
			ks.fails.count = 0
		}
		if err == nil {
			err = fmt.Errorf("runner returned while its lease was held")
		}
		s.startFailed(ks, err)
	}
	if s.stopping {
		return
	}
	s.reconcileKeyNow(ks)
	s.poke()
}

// startFailed records a failed start and schedules the next try with
// exponential backoff.
func (s *Supervisor) startFailed(ks *keyState, err error) {
	f := ks.failures()
	f.count++
	f.last = err
	delay := s.cfg.BackoffMin
	for i := 1; i < f.count && delay < s.cfg.BackoffMax; i++ {
		delay *= 2
	}
	delay = min(delay, s.cfg.BackoffMax)
	f.retryAt = time.Now().Add(delay)
	s.observeLocked(Observer.RunnerFailed)
	if s.crashLooping(ks) {
		return
	}
	s.logLocked(slog.LevelWarn, "runner failed; retrying with backoff", "key", ks.key, "failures", f.count, "retry_in", delay, "err", err)
	s.poke()
}

// crashLooping reports whether ks has failed MaxFailures times within
// FailureWindow, and if so hands it over: the key cools down, so
// reconcile releases its lease and nothing here acquires it again before
// the cooldown ends, and a healthy peer takes it at once. A key without a
// lease has nobody to hand over to: it only backs off.
func (s *Supervisor) crashLooping(ks *keyState) bool {
	limits := ks.job.crashLoop(s.cfg)
	if !s.leased || ks.job.Mode != Exclusive || limits.MaxFailures < 0 {
		return false
	}
	now := time.Now()
	f := ks.failures()
	recent := f.recent[:0]
	for _, t := range f.recent {
		if now.Sub(t) < limits.FailureWindow {
			recent = append(recent, t)
		}
	}
	f.recent = append(recent, now)
	if len(f.recent) < limits.MaxFailures {
		return false
	}
	*f = failureLog{last: f.last, coolUntil: now.Add(limits.Cooldown)}
	s.logLocked(slog.LevelError, "runner keeps failing; handing the key over to a peer",
		"key", ks.key, "failures", limits.MaxFailures, "within", limits.FailureWindow, "cooldown", limits.Cooldown, "err", f.last)
	s.poke()
	return true
}

// runSafely turns a runner's panic into an error so one key's bug cannot
// take the supervisor, and every other key's lease, down with it.
func runSafely(ctx context.Context, runner Runner, lease Lease) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("runner panicked: %v", p)
		}
	}()
	return runner.Run(ctx, lease)
}
