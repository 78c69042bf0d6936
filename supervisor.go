package tenure

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/clock"
	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/internal/logqueue"
	"github.com/tenure-dev/tenure/store"
)

// Errors a runner's context is cancelled with (context.Cause) and that
// Supervisor methods return.
var (
	// ErrLeaseLost: the store refused a renewal; a peer or a newer term holds the key.
	ErrLeaseLost = errors.New("tenure: lease lost")
	// ErrDeadline: renewals went unconfirmed until the lease's safety deadline.
	ErrDeadline = errors.New("tenure: lease deadline reached without a confirmed renewal")
	// ErrPaused: the key was paused cluster-wide (Pause).
	ErrPaused = errors.New("tenure: key paused")
	// ErrMoved: the key was moved to another replica (Move).
	ErrMoved = errors.New("tenure: key moved to another replica")
	// ErrKeyRemoved: the key was removed or disabled.
	ErrKeyRemoved = errors.New("tenure: key removed or disabled")
	// ErrStopping: the supervisor is shutting down.
	ErrStopping = errors.New("tenure: supervisor stopping")
	// ErrRebalance: the pool gave the key to another replica.
	ErrRebalance = errors.New("tenure: key handed over to rebalance the pool")
	// ErrRestart: the runner is being restarted (Restart, or a new Job).
	ErrRestart = errors.New("tenure: runner restarting")
	// ErrStopTimeout: a runner did not return within Config.StopTimeout; its
	// lease is kept (left to expire on shutdown).
	ErrStopTimeout = errors.New("tenure: runner did not stop in time")
	// ErrUnknownKey: the key is not configured on this supervisor.
	ErrUnknownKey = errors.New("tenure: unknown key")
	// ErrNotRunning: the supervisor's Run is not active.
	ErrNotRunning = errors.New("tenure: supervisor not running")
	// ErrAlreadyRunning: Run was called twice.
	ErrAlreadyRunning = errors.New("tenure: supervisor already running")
	// ErrStoreRefused: Run gave up because the store refused calls for
	// good, and answered none, for Config.MaxRefused rounds in a row
	// (store.Permanent: access denied, no store or table and no right to
	// create it, read-only, closed).
	ErrStoreRefused = errors.New("tenure: the store keeps refusing access")
)

// Supervisor runs a Runner for each configured key while, and only while,
// this replica holds the key's lease. Create it with New, add keys with
// Set, and call Run. Its methods are safe for concurrent use.
type Supervisor struct {
	cfg    Config
	owner  string // Config.Owner + "#" + incarnation
	leased bool
	keeper *hold.Keeper // nil in single-instance mode
	log    *slog.Logger
	logs   *logqueue.Queue // writes log's records while Run runs
	obs    Observer

	wake chan struct{} // pokes the loop; buffered, never blocks

	// mu guards the fields below and every keyState and pool coordinator.
	// Lock order: mu, then a runState's mu, then the keeper's; none of
	// them is held across a store call. Nothing logs or calls user code
	// while holding mu: logLocked queues a record that unlock writes once
	// mu is released, and a runner's deadline (runState's watchdog) takes
	// no lock but its own and the keeper's, so a blocked log handler or a
	// busy loop never delays a fail-closed stop.
	mu       sync.Mutex
	keys     map[string]*keyState
	active   bool // Run is running
	stopping bool // Run is shutting down
	// runCtx is Run's context without its cancellation: runners inherit its
	// values, and are cancelled one by one, in order, by shutdown.
	runCtx    context.Context
	actions   sync.WaitGroup // start actions and runner goroutines
	lastRound time.Time      // when the loop last began a round (Live)
	storeSeen time.Time      // when the store last answered (Ready)
	storeErr  error          // why it did not since
	// refusedRounds counts the rounds in a row in which the store refused
	// calls for good and answered none (MaxRefused); sawRefusal and
	// sawAnswer collect the calls since the last round.
	refusedRounds         int
	sawRefusal, sawAnswer bool
	// suspended is how long the host has slept since the process started
	// (clock.Suspended; a test may stage a suspend).
	suspended func() time.Duration
	// sleptSeen is the most slept time a loopClock has read. A deadline
	// is converted with it as well as with the reading its caller took
	// earlier, so that a caller whose reading predates a suspend cannot
	// move a deadline later once watchSuspend has moved it earlier.
	sleptSeen atomic.Int64
	dogs      *watchdogs      // every leased run's watchdog
	lost      map[string]bool // keys lost since the last table read: say to whom
	// pending are the log records and observer calls made under mu, run
	// once it is released (see unlock).
	pending []func()
	pools   poolSet
	table   tableReads
}

// loopClock reads the keeper's clock in a loop over many keys: time.Now()
// afresh at each reading, moved by the time the host has slept as read
// once, when the loop began. A suspend during the loop then reads as one
// just after it — which every deadline allows for, since the host may
// sleep at any moment — and the loop makes one system call
// (clock.Suspended) instead of one per key.
type loopClock struct {
	slept time.Duration
}

func (c loopClock) now() time.Time { return c.at(time.Now()) }

// at is local time t on the keeper's clock.
func (c loopClock) at(t time.Time) time.Time { return t.Add(c.slept) }

func (s *Supervisor) loopClock() loopClock {
	slept := s.suspended()
	for {
		seen := s.sleptSeen.Load()
		if int64(slept) <= seen || s.sleptSeen.CompareAndSwap(seen, int64(slept)) {
			return loopClock{slept: slept}
		}
	}
}

// New validates cfg and returns a Supervisor.
func New(cfg Config) (*Supervisor, error) {
	leased, err := cfg.leasesActive()
	if err != nil {
		return nil, err
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	owner := ownerID(cfg.Owner)
	s := &Supervisor{
		cfg:    cfg,
		leased: leased,
		owner:  owner,
		obs:    cfg.Observer,
		wake:   make(chan struct{}, 1),
		keys:   make(map[string]*keyState),

		suspended: clock.Suspended,
		table:     newTableReads(cfg.Prefix),
	}
	s.logs = logqueue.New(logqueue.DefaultSize, s.obs.LogRecordsDropped)
	s.log = slog.New(s.logs.Handler(cfg.Logger.Handler())).With("owner", owner)
	s.dogs = newWatchdogs(s.watchdogsFired)
	if leased {
		// Deadlines are measured on a clock that counts the time the host
		// spends suspended: a VM resumed after a pause must find its
		// deadlines passed, not still ahead.
		now := func() time.Time { return time.Now().Add(s.suspended()) }
		s.keeper = hold.New(cfg.Store, owner, hold.Timing{
			TTL: cfg.TTL, Grace: cfg.Grace, RenewEvery: cfg.RenewEvery, CallTimeout: cfg.CallTimeout,
		}, now)
	}
	return s, nil
}

// Owner is the owner id this supervisor holds leases under: Config.Owner,
// '#', and an incarnation drawn by New. It is what the store, status and
// Lease.Owner show, and it differs between any two supervisors — also two
// processes given the same Config.Owner — so that none can renew, release
// or re-acquire a term of another.
func (s *Supervisor) Owner() string { return s.owner }

// Leased reports whether keys are arbitrated through leases (false in
// single-instance mode).
func (s *Supervisor) Leased() bool { return s.leased }

// Config returns the configuration in force, defaults filled in.
func (s *Supervisor) Config() Config { return s.cfg }

func (s *Supervisor) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run supervises the keys until ctx is cancelled, then stops every runner
// (cancel, wait up to StopTimeout) and releases the leases of those that
// returned. A runner that does not return keeps its lease, which is left to
// expire; Run then returns an error wrapping ErrStopTimeout.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.active {
		s.unlock()
		return ErrAlreadyRunning
	}
	// Runners outlive ctx's cancellation until shutdown stops them in order.
	runCtx, cancelRunCtx := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRunCtx()
	s.active, s.stopping, s.runCtx = true, false, runCtx
	// A Run after a give-up (the grants fixed) starts counting afresh.
	s.refusedRounds, s.sawRefusal, s.sawAnswer, s.storeErr = 0, false, false, nil
	// From here a record is queued, not written by whoever logs (see
	// logs.go), until this Run is done with the queue and ends.
	s.logs.Start()
	s.unlock()

	var watchers sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	if w, ok := s.cfg.Store.(store.Watcher); ok && s.leased {
		watchers.Go(func() { s.watch(watchCtx, w) })
	}
	s.mu.Lock()
	for _, ps := range s.pools.byName {
		watchers.Go(func() { s.refreshPool(watchCtx, ps) })
	}
	s.unlock()

	// Renewals go on through the shutdown, while runners wind down (up to
	// StopTimeout): a runner that takes a while to return must not run
	// into its deadline, and a child process into its guard's stop, just
	// because the process is handing over.
	var renewals sync.WaitGroup
	renewCtx, stopRenewals := context.WithCancel(context.WithoutCancel(ctx))
	if s.leased {
		renewals.Go(func() { s.renewLoop(renewCtx) })
		renewals.Go(func() { s.watchSuspend(renewCtx) })
	}
	gaveUp := s.loop(ctx)

	// Hand over first: stop the runners and release their leases. Only
	// then wait for the watch and the key sources, one of which may be in
	// the middle of a slow read that must not delay the release.
	err := s.shutdown()
	stopRenewals()
	renewals.Wait()
	stopWatch()
	watchers.Wait()
	// Nothing is held or runs any more: a process that goes on serving
	// metrics must not export the last round's state.
	s.obs.Keys(nil)
	s.mu.Lock()
	none := make(map[string]int, len(s.pools.byName))
	sources := make([]PoolSource, 0, len(s.pools.byName))
	for name := range s.pools.byName {
		none[name] = 0
		sources = append(sources, PoolSource{Pool: name}) // no read, no keys, no membership
	}
	s.unlock()
	s.obs.Pools(none)
	s.obs.PoolSources(sources)
	if gaveUp != nil {
		s.log.Error("giving up: the store keeps refusing the calls for good", "err", gaveUp)
	}
	// Last, so that a Run that starts once this one is marked done finds
	// the log queue stopped and starts it afresh: what is queued is
	// written out first, for as long as a runner is given to stop.
	s.logs.Stop(s.cfg.StopTimeout)
	s.mu.Lock()
	s.active, s.runCtx = false, nil
	s.unlock()
	return errors.Join(gaveUp, err)
}

// loop runs supervision rounds every RenewEvery, and acquisition passes in
// between when a push event, a config change or a retry time calls for one.
func (s *Supervisor) loop(ctx context.Context) (gaveUp error) {
	nextRound := time.Now()
	for {
		if err := s.givenUp(); err != nil {
			return err
		}
		now := time.Now()
		if !now.Before(nextRound) {
			s.round(ctx)
			nextRound = now.Add(s.cfg.RenewEvery)
			now = time.Now()
		} else {
			s.mu.Lock()
			replan := s.pools.due(now)
			s.unlock()
			if replan && s.leased {
				if err := s.readTable(ctx); err == nil {
					s.planPools()
				} else {
					// The next round plans (and reads) again; retrying a
					// recheck now would spin while the table fails fast.
					s.mu.Lock()
					s.pools.replanAt = time.Time{}
					s.unlock()
				}
			}
			s.acquirePass(ctx)
			s.reconcile()
		}
		wait := nextRound.Sub(now)
		if due, ok := s.nextDue(); ok && due.Sub(now) < wait {
			wait = max(due.Sub(now), 0)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-s.wake:
			timer.Stop()
		}
	}
}

// round is one supervision round: acquisitions of wanted free keys, one
// read of the whole lease table, then start and stop actions scheduled per
// key. Renewals run on their own schedule (renewLoop).
func (s *Supervisor) round(ctx context.Context) {
	start := time.Now()
	s.mu.Lock()
	s.lastRound = start
	s.unlock()
	if s.leased {
		s.acquirePass(ctx)
		err := s.readTable(ctx)
		s.storeAnswered(err)
		if err != nil {
			s.log.Debug("could not read the lease table", "err", err)
		} else {
			s.explainLosses()
			s.applyControls()
		}
		s.scheduleFreedKeys()
		s.planPools()
		s.acquirePass(ctx) // what the pools just claimed
		s.retryReleases(ctx)
	}
	s.reconcile()
	s.reportKeys()
	s.countRefusedRound()
	s.obs.Round(time.Since(start))
}

// reportKeys tells the Observer each leased singleton key's state, how
// many keys of each pool this replica holds and each pool's source: per key for the few keys Set
// names, per pool for the thousands a pool may hold. Keys nobody should
// hold — disabled, finished, paused — and Everywhere keys are left out,
// so "held nowhere" and "running twice" stay alerts about real trouble.
func (s *Supervisor) reportKeys() {
	s.mu.Lock()
	defer s.unlock()
	if !s.leased {
		return
	}
	var keys []KeyState
	held := make(map[string]int, len(s.pools.byName))
	for name := range s.pools.byName {
		held[name] = 0
	}
	// One reading for the pass: what is reported is as of its start.
	keeperNow := s.loopClock().now()
	for key, ks := range s.keys {
		holds := s.leased && s.keeper.HoldsAt(key, keeperNow)
		switch {
		case ks.member != nil || !ks.configured:
		case ks.pool != nil:
			if holds {
				held[ks.pool.cfg.Name]++
			}
		case ks.job.Mode != Exclusive:
		default:
			switch ks.intent() {
			case wanted, cooling, moved:
				keys = append(keys, KeyState{Key: key, Held: holds, Running: ks.run != nil && !ks.run.stopped()})
			}
		}
	}
	sources := make([]PoolSource, 0, len(s.pools.byName))
	for name, ps := range s.pools.byName {
		keys, err := ps.coord.Source()
		sources = append(sources, PoolSource{Pool: name, Keys: keys, Failing: err != nil,
			Member: s.isMember(ps, keeperNow)})
	}
	s.observeLocked(func(o Observer) {
		o.Keys(keys)
		o.Pools(held)
		o.PoolSources(sources)
	})
}

// acquirePass tries to acquire every wanted key that is not held and whose
// next attempt is due.
func (s *Supervisor) acquirePass(ctx context.Context) {
	if !s.leased {
		return
	}
	now := time.Now()
	clk := s.loopClock()
	s.mu.Lock()
	var due []string
	for key, ks := range s.keys {
		// A runner still alive (even one winding down) keeps its term: a
		// new term starts only once it has returned.
		if ks.wantsLease() && ks.run == nil && !s.keeper.HoldsAt(key, clk.now()) && !now.Before(ks.nextAcquire) {
			due = append(due, key)
		}
	}
	s.unlock()
	slices.Sort(due)
	// Bound the pass so a pool claiming thousands of keys never holds up
	// the next renewal: what is left is acquired on the next pass.
	budget := time.Now().Add(s.cfg.CallTimeout)
	for i, key := range due {
		if ctx.Err() != nil {
			return
		}
		if i > 0 && time.Now().After(budget) {
			s.poke()
			return
		}
		s.mu.Lock()
		member := s.keys[key] != nil && s.keys[key].member != nil
		s.unlock()
		res, err := s.keeper.Acquire(ctx, key, member)
		s.storeAnswered(err)
		if err == nil && res.Ended {
			// Our term ended while it could not be renewed, and the store
			// says so here first.
			s.obs.Handover(HandoverExpired)
			s.log.Warn("lease lost: another owner or a newer term holds the key", "key", key, "holder", res.Holder.Owner, "holder_epoch", res.Holder.Epoch)
			s.lostTo(key, res.Holder)
		}
		s.mu.Lock()
		ks := s.keys[key]
		switch {
		case ks == nil:
		case err != nil:
			s.logLocked(slog.LevelWarn, "could not acquire lease; retrying next round", "key", key, "err", err)
			ks.nextAcquire = now.Add(s.cfg.RenewEvery)
		case res.OK && res.New:
			s.logLocked(slog.LevelInfo, "acquired lease", "key", key, "epoch", res.Epoch)
			s.observeLocked(Observer.Acquired)
			ks.newTerm = true
			ks.acquiredAt = time.Now()
			ks.heldSince = ks.acquiredAt
			ks.nextAcquire = time.Time{}
		case !res.OK && ks.pool != nil:
			ks.claim = false // a peer got it first; the next plan decides again
		case !res.OK:
			// Never sooner than a moment from now, so a refusal at the
			// boundary of grace cannot turn into a busy loop.
			// RetryAt is on the keeper's clock, which runs ahead of
			// time.Now by the time the host has slept.
			ks.nextAcquire = later(res.RetryAt.Add(-s.suspended()), time.Now().Add(minRetry))
		}
		s.unlock()
	}
}

// scheduleFreedKeys makes the next attempt immediate for wanted keys the
// lease table shows as released or past grace, so a store without a push
// channel still hands over within one round.
func (s *Supervisor) scheduleFreedKeys() {
	s.mu.Lock()
	defer s.unlock()
	poke := false
	clk := s.loopClock()
	for _, l := range s.keeper.Released() {
		ks := s.keys[l.Key]
		if ks == nil || ks.nextAcquire.IsZero() || !ks.wantsLease() || s.keeper.HoldsAt(l.Key, clk.now()) {
			continue
		}
		ks.nextAcquire = time.Time{}
		poke = true
	}
	if poke {
		s.poke()
	}
}

// nextDue is the earliest time a key needs the loop: an acquisition retry
// or a runner restart after backoff.
func (s *Supervisor) nextDue() (time.Time, bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.unlock()
	var due time.Time
	found := false
	consider := func(t time.Time) {
		if !found || t.Before(due) {
			due, found = t, true
		}
	}
	if !s.pools.replanAt.IsZero() {
		consider(s.pools.replanAt)
	}
	clk := s.loopClock()
	for key, ks := range s.keys {
		if s.leased && ks.wantsLease() && ks.run == nil && !s.keeper.HoldsAt(key, clk.now()) {
			consider(ks.nextAcquire)
		}
		if ks.fails == nil {
			continue
		}
		if ks.run == nil && ks.fails.retryAt.After(now) && ks.wantsRun() {
			consider(ks.fails.retryAt)
		}
		if ks.fails.coolUntil.After(now) {
			consider(ks.fails.coolUntil)
		}
	}
	return due, found
}

// minRetry is the shortest wait before acquiring a refused key again.
const minRetry = 5 * time.Millisecond

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
