package tenure

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/internal/engine/policyhook"
	"github.com/tenure-dev/tenure/internal/engine/poolcoord"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// Reserved segments of lease keys. Under Config.Prefix P, key K of pool
// NAME is leased as P + PoolPrefix + NAME + "/" + K, so two pools — or a
// pool and a singleton — using one key name never share a lease; each
// worker holds a membership lease P + WorkerPrefix + NAME + "/" + owner +
// "@" + weight, followed by ",max=" + MaxKeys when it has a limit. A key
// given to Set may hold neither segment.
const (
	PoolPrefix   = poolkey.KeysSegment
	WorkerPrefix = poolkey.WorkersSegment
)

// Pool is a set of keys shared fairly across every replica that runs the
// same pool: each key is run by at most one replica, and keys are
// rebalanced as replicas come and go.
//
// Each key has a preferred replica by weighted rendezvous hashing over the
// live replicas. A replica claims the keys it prefers up to a cap slightly
// above its fair share, claims orphaned keys after a short delay, sheds the
// keys it is least preferred for above the cap, and hands keys over to a
// preferred replica that is under its share — a few per round, only after
// a minimum hold, and never below the low edge of its own share
// (fair·(1-Epsilon) rounded up, at most fair rounded down) — so a join
// moves close to the minimum number of keys, no key bounces, and no
// replica is left short by what it gave. A replica below that edge gets
// spare keys from the others, from what they hold above their targets
// or, when that is not enough (in pools of few keys a replica), above
// their own edges.
type Pool struct {
	// Name identifies the pool; every replica of the pool uses the same
	// name. It must be a plain identifier (letters, digits, underscore).
	// It is also the pool's namespace in the store: replicas share a
	// pool's keys exactly when they use the same name (and Config.Prefix).
	Name string
	// Source supplies the keys. Keys listed twice count once. Required.
	// A replica joins the pool, and takes a share of its keys, only once
	// it has read them: one that cannot (a command missing on its host,
	// a key that is not valid) logs why at each attempt, every
	// RefreshEvery, and leaves the keys to its peers. A slow first read
	// keeps it out for as long, up to SourceTimeout: its peers run the
	// keys meanwhile and hand over its share once it joins. A read that
	// fails later keeps the last keys read.
	Source KeySource
	// Runner runs each claimed key; lease.Key is the key as Source gave it
	// (the lease itself lives in the pool's namespace). Required.
	Runner Runner
	// RefreshEvery is how often Source is read. Default 30s. Call
	// Supervisor.RefreshPool to read it at once.
	RefreshEvery time.Duration
	// SourceTimeout bounds each read of Source; a read that fails or times
	// out is logged and the last good key set stays in force. Default
	// RefreshEvery. A Source must return once its context is done; one
	// that does not within a second more is counted as failing until it
	// does (its answer then counts), is not read again meanwhile, and does
	// not hold up Run's end.
	SourceTimeout time.Duration
	// Weight scales this replica's share: a finite positive number,
	// default 1.
	Weight float64
	// Epsilon, MaxKeys, OrphanDelay, MinHold and HandoffRate tune the
	// balance; zero values take the defaults: 0.1, no maximum,
	// 1.5×RenewEvery (longer than a round, so a handed-over key reaches
	// its preferred worker first even without push events), 30s and 0.1.
	// A worker holds at most MaxKeys; a share above it goes to the
	// others. Replicas may set different weights and limits: both are in
	// the replica's membership lease, so every replica plans with each
	// one's own. (Versions that wrote no limit there ignore a membership
	// that has one, so a pool that mixes them balances unevenly until
	// every replica runs this one.) A key is handed over only once held
	// MinHold, so it does not bounce, except back to a worker that it was
	// taken from while that worker restarted (after a stay of MinHold or
	// more).
	Epsilon     float64
	MaxKeys     int
	OrphanDelay time.Duration
	MinHold     time.Duration
	HandoffRate float64

	// policy, when set (only through policyhook), replaces the balanced
	// policy the fields above tune.
	policy balance.Policy
}

func init() {
	policyhook.WithPolicy = func(pool any, p balance.Policy) any {
		pl := pool.(Pool)
		pl.policy = p
		return pl
	}
}

// poolSet is every pool of a supervisor, and when they plan next. Guarded
// by Supervisor.mu.
type poolSet struct {
	byName   map[string]*poolState
	replan   bool      // a pool's keys or the lease table changed: plan again
	replanAt time.Time // plan again then: an orphan's delay ends
}

// due reports whether the pools must plan before the next round.
func (p *poolSet) due(now time.Time) bool {
	return p.replan || !p.replanAt.IsZero() && !now.Before(p.replanAt)
}

// recheckAt asks for a plan at t, unless one comes sooner.
func (p *poolSet) recheckAt(t time.Time) {
	if !t.IsZero() && (p.replanAt.IsZero() || t.Before(p.replanAt)) {
		p.replanAt = t
	}
}

// concerns reports whether a change to leaseKey can change a pool's plan.
func (p *poolSet) concerns(leaseKey string) bool {
	for _, ps := range p.byName {
		if ps.coord.Concerns(leaseKey) {
			return true
		}
	}
	return false
}

// poolState is a pool's run-time state: its configuration and its
// coordinator, which Supervisor.mu guards.
type poolState struct {
	cfg     Pool
	job     *Job // every key's: one, not 80 bytes in each of 100,000 keys
	coord   *poolcoord.Coordinator
	refresh chan struct{}
	// stuck is where the answer of a read of Source that outlived its
	// timeout (a source that ignores its context) will come, until it has;
	// only the goroutine that reads the source touches it.
	stuck <-chan sourceAnswer
}

type sourceAnswer struct {
	keys []string
	err  error
}

// AddPool adds a pool to the supervisor, before Run. Leases must be on.
func (s *Supervisor) AddPool(p Pool) error {
	if err := store.ValidateName("pool name", p.Name); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	finite := func(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }
	switch {
	case !s.leased:
		return fmt.Errorf("pool %s: pools need leases (a store and Leases on): %w", p.Name, ErrConfig)
	case p.Source == nil:
		return fmt.Errorf("pool %s: Source is required: %w", p.Name, ErrConfig)
	case p.Runner == nil:
		return fmt.Errorf("pool %s: Runner is required: %w", p.Name, ErrConfig)
	case p.Weight != 0 && !poolkey.ValidWeight(p.Weight):
		return fmt.Errorf("pool %s: Weight %v must be a finite positive number: %w", p.Name, p.Weight, ErrConfig)
	case !finite(p.Epsilon) || p.Epsilon < 0:
		return fmt.Errorf("pool %s: Epsilon %v must be a finite number, not negative: %w", p.Name, p.Epsilon, ErrConfig)
	case !finite(p.HandoffRate) || p.HandoffRate < 0 || p.HandoffRate > 1:
		return fmt.Errorf("pool %s: HandoffRate %v must be between 0 and 1: %w", p.Name, p.HandoffRate, ErrConfig)
	case p.MaxKeys < 0 || p.MinHold < 0 || p.OrphanDelay < 0 || p.RefreshEvery < 0 || p.SourceTimeout < 0:
		return fmt.Errorf("pool %s: MaxKeys, MinHold, OrphanDelay, RefreshEvery and SourceTimeout must not be negative: %w", p.Name, ErrConfig)
	}
	if p.Weight == 0 {
		p.Weight = 1
	}
	if p.RefreshEvery <= 0 {
		p.RefreshEvery = 30 * time.Second
	}
	if p.SourceTimeout <= 0 {
		p.SourceTimeout = p.RefreshEvery
	}
	if p.OrphanDelay <= 0 {
		p.OrphanDelay = s.cfg.RenewEvery * 3 / 2
	}
	policy := p.policy
	if policy == nil {
		policy = balance.NewBalanced(balance.Config{
			Epsilon: p.Epsilon, OrphanDelay: p.OrphanDelay,
			MinHold: p.MinHold, HandoffRate: p.HandoffRate,
		})
	}
	coord, err := poolcoord.New(poolcoord.Config{
		Prefix: s.cfg.Prefix, Pool: p.Name, Self: s.owner, Weight: p.Weight, MaxKeys: p.MaxKeys, NameOf: OwnerName, Policy: policy,
	})
	if err != nil {
		return fmt.Errorf("pool %s: %w", p.Name, err)
	}
	ps := &poolState{cfg: p, job: &Job{Runner: p.Runner}, coord: coord, refresh: make(chan struct{}, 1)}
	member := coord.MemberKey()
	s.mu.Lock()
	defer s.unlock()
	if s.pools.byName == nil {
		s.pools.byName = make(map[string]*poolState)
	}
	switch _, dup := s.pools.byName[p.Name]; {
	case dup:
		return fmt.Errorf("pool %s: already added: %w", p.Name, ErrConfig)
	case s.active:
		// Run starts each pool's reading of its source: a pool added
		// later was never read, so it never joined and ran nothing,
		// without a word.
		return fmt.Errorf("pool %s: add pools before Run: %w", p.Name, ErrConfig)
	}
	s.pools.byName[p.Name] = ps
	// Membership is a lease like any other, renewed in the same batch; its
	// runner only marks the worker as running (not draining).
	s.keys[member] = &keyState{key: member, poolRole: poolRole{member: ps}, configured: true, job: &Job{Runner: RunnerFunc(func(ctx context.Context, _ Lease) error {
		<-ctx.Done()
		return nil
	})}}
	return nil
}

// RefreshPool makes the pool read its key source now.
func (s *Supervisor) RefreshPool(name string) error {
	s.mu.Lock()
	ps := s.pools.byName[name]
	s.unlock()
	if ps == nil {
		return fmt.Errorf("pool %q: %w", name, ErrUnknownKey)
	}
	select {
	case ps.refresh <- struct{}{}:
	default:
	}
	return nil
}

// refreshPools reads every pool's key source periodically and on demand,
// outside the supervision loop so a slow source never delays a renewal.
func (s *Supervisor) refreshPool(ctx context.Context, ps *poolState) {
	var late *sourceAnswer // a stuck read's answer, come at last
	for {
		var keys []string
		var err error
		if late != nil {
			keys, err, late = late.keys, late.err, nil
		} else {
			keys, err = ps.read(ctx)
		}
		s.mu.Lock()
		var dups int
		newDups := false
		if err == nil {
			dups, newDups, err = ps.coord.SetKeys(keys)
			if err == nil {
				// The view of the pool's keys follows their positions.
				s.keeper.Number(ps.coord.Index())
			}
		} else {
			ps.coord.SourceFailed(err)
		}
		switch {
		case errors.Is(err, errSourceStuck):
			s.logLocked(slog.LevelWarn, "could not read the pool's keys; reading them again once the read under way returns", "pool", ps.cfg.Name, "err", err, "joined", ps.coord.Loaded())
		case err != nil && !ps.coord.Loaded():
			s.logLocked(slog.LevelWarn, "could not read the pool's keys; not joining the pool until they can be read", "pool", ps.cfg.Name, "err", err, "next_read_in", ps.cfg.RefreshEvery)
		case err != nil:
			s.logLocked(slog.LevelWarn, "could not read the pool's keys; keeping the previous set", "pool", ps.cfg.Name, "err", err)
		default:
			if newDups {
				s.logLocked(slog.LevelWarn, "the pool's key source lists keys more than once; each runs once", "pool", ps.cfg.Name, "duplicates", dups)
			}
			s.pools.replan = true
		}
		s.unlock()
		s.poke()
		t := time.NewTimer(ps.cfg.RefreshEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-ps.refresh:
			t.Stop()
		case a := <-ps.stuck: // nil, so never ready, unless a read is stuck
			t.Stop()
			ps.stuck, late = nil, &a
		}
	}
}

// sourceGrace is how long past SourceTimeout a read of a pool's source is
// waited for: a source that honours its context returns within it.
const sourceGrace = time.Second

// read reads the pool's keys within SourceTimeout. A source that ignores
// its context (a call made without it) is not waited for past that and
// sourceGrace, nor once ctx ends: the read fails, so the replica says its
// source is failing instead of "not read yet" forever, and Run can end.
// Until that read returns, none is started after it (a source that hangs
// for good holds one goroutine, not one more every RefreshEvery), and its
// answer counts when it comes (refreshPool waits for it too).
func (ps *poolState) read(ctx context.Context) ([]string, error) {
	if ps.stuck != nil {
		select {
		case a := <-ps.stuck:
			ps.stuck = nil
			return a.keys, a.err
		default:
			return nil, errSourceStuck
		}
	}
	rctx, cancel := context.WithTimeout(ctx, ps.cfg.SourceTimeout)
	defer cancel()
	answer := make(chan sourceAnswer, 1)
	go func() {
		keys, err := ps.cfg.Source.Keys(rctx)
		answer <- sourceAnswer{keys, err}
	}()
	select {
	case a := <-answer:
		return a.keys, a.err
	case <-rctx.Done():
	}
	grace := time.NewTimer(sourceGrace)
	defer grace.Stop()
	select {
	case a := <-answer:
		return a.keys, a.err
	case <-grace.C:
	case <-ctx.Done(): // Run is ending: it waits for no source
	}
	ps.stuck = answer
	return nil, errSourceStuck
}

// errSourceStuck is a read of a pool's source that did not return once its
// context was done.
var errSourceStuck = errors.New("the key source did not return within its timeout and after: it must return once its context is done")

// planPools runs every pool's policy on the last observed lease table and
// marks the keys to claim and to give back.
func (s *Supervisor) planPools() {
	now := time.Now()
	s.mu.Lock()
	defer s.unlock()
	s.pools.replan, s.pools.replanAt = false, time.Time{}
	type planning struct {
		ps *poolState
		p  *poolcoord.Planning
	}
	var plans []planning
	for _, ps := range s.pools.byName {
		if p := ps.coord.Begin(now, s.poolSelf(ps, now)); p != nil {
			plans = append(plans, planning{ps, p})
		}
	}
	if len(plans) == 0 {
		return
	}
	// The coordinators read the keeper's view in place, in one pass for
	// every pool, under the keeper's lock as well as ours, instead of a
	// copy made before taking ours (40 bytes per key of the namespace,
	// every round). The cost: a renewal that lost a lease waits for the
	// pass (tens of milliseconds at 100,000 keys) to stop the runner
	// early, and so does a run's watchdog, which asks the keeper whether
	// a renewal came before it stops the run at StopAt. StopAt is a
	// renewal period before the deadline, which absorbs that.
	for e := range s.leaseTable(true) {
		for _, pl := range plans {
			pl.p.Observe(e)
		}
	}
	for _, pl := range plans {
		s.applyRound(pl.ps, pl.p.Finish())
	}
	s.poke()
}

// poolSelf is this worker's standing in ps now. s.mu is held.
func (s *Supervisor) poolSelf(ps *poolState, now time.Time) poolcoord.Self {
	memberKey := ps.coord.MemberKey()
	// Claim only once membership has been held for a round, so peers
	// starting together see each other first: otherwise the first one up
	// claims every key and sheds most of them a moment later.
	member := s.keeper.Holds(memberKey)
	settled := false
	if mk := s.keys[memberKey]; mk != nil && member {
		settled = now.Sub(mk.heldSince) >= s.cfg.RenewEvery
	}
	return poolcoord.Self{Member: member, Settled: settled, HeldSince: func(key string) (time.Time, bool) {
		if ks := s.keys[key]; ks != nil {
			return ks.heldSince, true
		}
		return time.Time{}, false
	}}
}

// applyRound marks the keys ps's round claims and gives back, and forgets
// those it no longer manages. s.mu is held.
func (s *Supervisor) applyRound(ps *poolState, round poolcoord.Round) {
	for _, key := range round.Malformed {
		s.logLocked(slog.LevelWarn, "ignored a pool member whose membership lease is malformed (its weight must be a finite positive number, its key limit a positive whole number)", "pool", ps.cfg.Name, "lease", key)
	}
	s.pools.recheckAt(round.Recheck)
	for _, key := range round.Claim {
		ks := s.keys[key]
		if ks == nil {
			k, _ := ps.coord.PoolKey(key)
			ks = &keyState{key: key, poolRole: poolRole{poolKey: k}}
			s.keys[key] = ks
		}
		ks.pool, ks.configured, ks.claim = ps, true, true
		ks.job = ps.job
		ks.nextAcquire = time.Time{}
	}
	for _, key := range round.Release {
		if ks := s.keys[key]; ks != nil && ks.pool == ps {
			ks.claim = false
		}
	}
	for key, ks := range s.keys {
		if ks.pool != ps {
			continue
		}
		if !ps.coord.Wants(key) {
			ks.configured = false // left the source: stop, release, forget
		}
		if !ks.claim && ks.phase() == idle {
			if _, held := s.keeper.Term(key); !held {
				delete(s.keys, key)
			}
		}
	}
}

// leaseTable is the holder's view of the lease table for the pool
// coordinators: every live lease, and with inGrace also those whose
// holder's term ended less than grace ago. It is read from the keeper's
// view as it is iterated, under the keeper's lock: the loop must not call
// the keeper.
func (s *Supervisor) leaseTable(inGrace bool) iter.Seq[poolcoord.Entry] {
	return func(yield func(poolcoord.Entry) bool) {
		s.keeper.LiveOwners(inGrace, func(l hold.Seen) bool {
			index, _ := l.Keys.(*poolcoord.Index) // the keeper numbers only pools' keys
			return yield(poolcoord.Entry{Key: l.Key, Index: index, At: l.At, Owner: l.Owner, Live: l.Live, Running: l.Running})
		})
	}
}

// PoolStatus is one pool as this replica sees it.
type PoolStatus struct {
	Name    string         `json:"name"`
	Keys    int            `json:"keys"`
	Held    int            `json:"held"`
	Target  int            `json:"target"`
	Cap     int            `json:"cap"`
	Workers map[string]int `json:"workers"` // live worker → keys it holds
	// Member: this replica holds its membership of the pool. It joins
	// once it has read the pool's keys; until then Error says why not.
	Member bool   `json:"member"`
	Error  string `json:"error,omitempty"`
}

// isMember reports whether this replica holds its membership of ps at
// now, so takes part in the pool; s.mu is held.
func (s *Supervisor) isMember(ps *poolState, now time.Time) bool {
	return s.leased && s.keeper.HoldsAt(ps.coord.MemberKey(), now)
}

// Pools reports every pool: its keys, this replica's share and the keys
// each live worker holds.
func (s *Supervisor) Pools() []PoolStatus {
	s.mu.Lock()
	var out []PoolStatus
	var errs []error // each pool's source error, formatted once unlocked: user code
	for _, ps := range s.pools.byName {
		c := ps.coord.Status(s.leaseTable(false))
		out = append(out, PoolStatus{Name: c.Name, Keys: c.Keys, Held: c.Held, Target: c.Target, Cap: c.Cap, Workers: c.Workers,
			Member: s.isMember(ps, s.loopClock().now())})
		errs = append(errs, c.Error)
	}
	s.unlock()
	for i, err := range errs {
		if err != nil {
			out[i].Error = err.Error()
		}
	}
	return out
}
