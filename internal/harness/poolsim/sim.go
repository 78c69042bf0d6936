// Package poolsim runs a pool of workers sharing keys through a lease
// store on a fake clock, so that pool policies can be compared: Tenure's
// balance.Balanced against [Reference], the reference design's policy.
//
// Every worker is package tenure's real engine — a Supervisor with a Pool
// — on one memstore, inside a synctest bubble whose clock moves only when
// every goroutine waits. The simulator starts, stops and crashes
// supervisors at scheduled instants and records what the engine does from
// the outside: every runner's start and end (moves, bounces, unowned
// spells, each worker's share) and every store call (releases, refusals,
// lost renewals). It plays no part of a round itself, so its figures are
// the engine's own.
//
// A Sim must be made, used and closed inside synctest.Test. A seed fixes
// when each worker starts; workers acting in the same instant race as
// real processes do, so two runs of one seed may differ by a few moves.
package poolsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/policyhook"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// PoolName is the simulated pool's name.
const PoolName = "sim"

// Config describes a simulated pool. Zero durations take the engine's
// defaults: TTL 15s, Grace 5s, a round every 5s.
type Config struct {
	// Keys are the pool's keys, in source order.
	Keys []string
	// Balance tunes Tenure's policy through the Pool's fields; zero
	// fields take the engine's defaults.
	Balance balance.Config
	// MaxKeys is each worker's Pool.MaxKeys, by worker id; a worker not
	// in it has no limit.
	MaxKeys map[string]int
	// NewPolicy, when set, replaces Tenure's policy on every worker (a new
	// or restarted one) with another, such as [Reference].
	NewPolicy func(worker string) balance.Policy
	TTL       time.Duration
	Grace     time.Duration
	// ClaimInterval is the time between a worker's rounds: the engine's
	// RenewEvery.
	ClaimInterval time.Duration
	// MinHold is the window in which a second move of the same key counts
	// as a bounce, and a shed of a key held that briefly counts as a fresh
	// shed. Default 30s (Balanced's MinHold default).
	MinHold time.Duration
	// Seed drives the workers' start offsets.
	Seed uint64
	// Push gives the store a push channel (PostgreSQL, Redis, etcd): every
	// release reaches every other worker at once. Without it (SQLite
	// across processes, MySQL) workers see a release at their next round.
	Push bool
	// FullReadEvery is each worker's Config.FullReadEvery: how often a
	// worker that follows the push channel reads the whole lease table.
	// Zero takes the engine's default; ClaimInterval reads it every round.
	FullReadEvery time.Duration
	// WatchBuffer is the store's watch buffer (memstore.Options); zero is
	// memstore's default.
	WatchBuffer int
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = 15 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 5 * time.Second
	}
	if c.ClaimInterval <= 0 {
		c.ClaimInterval = 5 * time.Second
	}
	if c.MinHold <= 0 {
		c.MinHold = 30 * time.Second
	}
	return c
}

// Sim is a simulated pool. Its methods must be called from the goroutine
// of the synctest bubble it was made in.
type Sim struct {
	cfg    Config
	st     *memstore.Store
	rng    *rand.Rand
	start  time.Time
	keySet map[string]bool

	workers    map[string]*worker
	joined     []string // worker ids in first-join order: a stable iteration order
	events     []event
	seq        int
	samples    []Sample
	nextSample time.Time

	mu         sync.Mutex // guards what runners and store calls record, below
	keys       map[string]*keyLog
	episodes   []episode            // finished spells of a key running nowhere
	crashWatch map[string]time.Time // crashed worker's key → crash time
	recoveries []episode            // crash → running again
	totals     Totals
}

// worker is one process: a Supervisor behind its own cuttable connection.
type worker struct {
	id      string
	cut     *testenv.Partition
	cancel  context.CancelFunc
	done    chan error
	alive   bool
	leaving bool // a graceful stop: its releases are not a policy's (s.mu)
}

type event struct {
	at  time.Time
	seq int
	do  func(context.Context) error
}

// Totals are counters over a whole run. [Sim.Mark] and [Sim.Stats]
// report them per window.
type Totals struct {
	Acquires   int // pool keys the store granted
	Moves      int // runs started on another worker than the key's previous run
	Bounces    int // moves of a key that had moved less than MinHold before
	Released   int // keys a policy gave back (not counting a leave)
	FreshSheds int // of those, keys that ran for less than MinHold
	Refusals   int // claims the store refused
	Lost       int // leases the engine lost: a renewal refused
	// DeadlineStops are runners stopped at their lease's safety deadline:
	// renewals went unconfirmed for too long.
	DeadlineStops int
	// Overlaps counts a key running on two workers at once, or running on
	// a worker while the store's live lease names another. It must stay
	// zero.
	Overlaps int
	// Lists and RowsRead count the workers' reads of the lease table and
	// the leases those reads returned.
	Lists, RowsRead int
}

// Sample is the keys each active worker runs at one instant.
type Sample struct {
	At     time.Time
	Counts map[string]int // active worker → keys whose runner runs there
}

// New returns a simulator with no workers. Call it inside synctest.Test,
// and Close the Sim before the bubble ends.
func New(cfg Config) (*Sim, error) {
	cfg = cfg.withDefaults()
	s := &Sim{
		cfg:        cfg,
		st:         memstore.New(memstore.Options{WatchBuffer: cfg.WatchBuffer}),
		rng:        rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		start:      time.Now(),
		keySet:     make(map[string]bool, len(cfg.Keys)),
		workers:    make(map[string]*worker),
		keys:       make(map[string]*keyLog, len(cfg.Keys)),
		crashWatch: make(map[string]time.Time),
	}
	for _, k := range cfg.Keys {
		if err := store.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("poolsim: %w", err)
		}
		s.keySet[k] = true
		s.keys[k] = &keyLog{}
	}
	s.nextSample = s.start
	return s, nil
}

// Now is the simulated time.
func (s *Sim) Now() time.Time { return time.Now() }

// Config is the configuration in effect, defaults filled in.
func (s *Sim) Config() Config { return s.cfg }

// Store is the lease store every worker shares.
func (s *Sim) Store() *memstore.Store { return s.st }

// Totals are the counters since the start.
func (s *Sim) Totals() Totals {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totals
}

// At schedules f at simulated time t (now if t is past). Events at the
// same instant run in the order they were scheduled, before a sample.
func (s *Sim) At(t time.Time, f func(ctx context.Context) error) {
	s.seq++
	s.events = append(s.events, event{at: t, seq: s.seq, do: f})
}

// RunFor lets the pool run for d, running every event and sample that
// falls due. Between steps it waits until every worker is idle, so each
// step sees the pool at rest.
func (s *Sim) RunFor(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		at, step := s.nextSample, func(context.Context) error { s.sample(ctx); return nil }
		if i := s.nextEvent(); i >= 0 && !s.events[i].at.After(at) {
			e := s.events[i]
			at, step = e.at, func(ctx context.Context) error {
				s.events = slices.Delete(s.events, i, i+1)
				return e.do(ctx)
			}
		}
		if at.After(end) {
			sleepUntil(end)
			return nil
		}
		sleepUntil(at)
		if err := step(ctx); err != nil {
			return err
		}
	}
}

// nextEvent is the index of the earliest event, -1 if none.
func (s *Sim) nextEvent() int {
	best := -1
	for i, e := range s.events {
		if best < 0 || e.at.Before(s.events[best].at) || e.at.Equal(s.events[best].at) && e.seq < s.events[best].seq {
			best = i
		}
	}
	return best
}

// sleepUntil moves the bubble's clock to t and waits until every worker
// has done what falls due by then.
func sleepUntil(t time.Time) {
	time.Sleep(time.Until(t))
	synctest.Wait()
}

// Join starts worker id now. A crashed or departed id may join again (a
// restart): a new Supervisor, with a fresh policy.
func (s *Sim) Join(_ context.Context, id string) error {
	return s.join(id, nil)
}

// JoinAt schedules Join(id) at t.
func (s *Sim) JoinAt(t time.Time, id string) {
	s.At(t, func(ctx context.Context) error { return s.Join(ctx, id) })
}

// join starts worker id; wrap, when set, wraps its policy.
func (s *Sim) join(id string, wrap func(balance.Policy) balance.Policy) error {
	if w := s.workers[id]; w != nil && w.alive {
		return fmt.Errorf("poolsim: worker %s is already running", id)
	}
	w := &worker{id: id, cut: &testenv.Partition{Store: s.st}, done: make(chan error, 1), alive: true}
	var st store.Store = &tap{Partition: w.cut, sim: s, w: w}
	if s.cfg.Push {
		st = pushTap{tap: st.(*tap), watcher: s.st}
	}
	sup, err := tenure.New(tenure.Config{Store: st, Owner: id, TTL: s.cfg.TTL, Grace: s.cfg.Grace,
		RenewEvery: s.cfg.ClaimInterval, FullReadEvery: s.cfg.FullReadEvery, Logger: slog.New(slog.DiscardHandler), Observer: observer{sim: s}})
	if err != nil {
		return fmt.Errorf("poolsim: join %s: %w", id, err)
	}
	b := s.cfg.Balance
	pool := tenure.Pool{Name: PoolName, Source: tenure.StaticKeys(s.cfg.Keys...), RefreshEvery: time.Hour,
		Epsilon: b.Epsilon, MaxKeys: s.cfg.MaxKeys[id], OrphanDelay: b.OrphanDelay, MinHold: b.MinHold, HandoffRate: b.HandoffRate,
		Runner: s.runner(id)}
	var policy balance.Policy
	if s.cfg.NewPolicy != nil {
		policy = s.cfg.NewPolicy(id)
	}
	if wrap != nil {
		policy = wrap(policy)
	}
	if policy != nil {
		pool = policyhook.WithPolicy(pool, policy).(tenure.Pool)
	}
	if err := sup.AddPool(pool); err != nil {
		return fmt.Errorf("poolsim: join %s: %w", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.done <- sup.Run(ctx) }()
	if _, seen := s.workers[id]; !seen {
		s.joined = append(s.joined, id)
	}
	s.workers[id] = w
	return nil
}

// Leave stops worker id gracefully: its runners stop and it releases
// every key and its membership.
func (s *Sim) Leave(_ context.Context, id string) error {
	w := s.workers[id]
	if w == nil || !w.alive {
		return fmt.Errorf("poolsim: leave %s: not running", id)
	}
	s.mu.Lock()
	w.leaving = true
	s.mu.Unlock()
	return s.stop(w)
}

// Crash stops worker id without a word, as a process that died: its
// runners stop, its leases run out on their own. The keys it ran are
// watched until they run again elsewhere.
func (s *Sim) Crash(id string) error {
	w := s.workers[id]
	if w == nil || !w.alive {
		return fmt.Errorf("poolsim: crash %s: not running", id)
	}
	s.mu.Lock()
	for k, kl := range s.keys {
		if kl.runningOn(id) {
			s.crashWatch[k] = time.Now()
		}
	}
	s.mu.Unlock()
	w.cut.Cut.Store(true)
	return s.stop(w)
}

// stop ends w's Run and waits for it.
func (s *Sim) stop(w *worker) error {
	w.cancel()
	err := <-w.done
	w.alive = false
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("poolsim: %s: %w", w.id, err)
	}
	return nil
}

// Close stops every running worker gracefully. Call it before the
// synctest bubble ends.
func (s *Sim) Close() error {
	var errs []error
	for _, id := range s.Active() {
		errs = append(errs, s.Leave(context.Background(), id))
	}
	return errors.Join(errs...)
}

// Active are the running workers, in join order.
func (s *Sim) Active() []string {
	var out []string
	for _, id := range s.joined {
		if s.workers[id].alive {
			out = append(out, id)
		}
	}
	return out
}

// StartAll schedules the workers to join within the next claim interval,
// each at a random offset, as processes of one deployment that start at
// about the same time.
func (s *Sim) StartAll(_ context.Context, ids []string) error {
	for _, id := range ids {
		s.JoinAt(time.Now().Add(s.randDur(s.cfg.ClaimInterval)), id)
	}
	return nil
}

// SeedEven starts the workers as StartAll does, but each first takes only
// its round-robin share (key i to worker i mod n), as if a balanced pool
// had been running for a while: the start every policy would call
// balanced. Three claim intervals after now (a worker claims from its
// second round on) every worker hands over to its
// own policy, which finds the pool split evenly. It needs Config.NewPolicy.
func (s *Sim) SeedEven(_ context.Context, ids []string) error {
	if s.cfg.NewPolicy == nil {
		return errors.New("poolsim: SeedEven needs Config.NewPolicy")
	}
	until := time.Now().Add(3 * s.cfg.ClaimInterval)
	for i, id := range ids {
		var share []string
		for j, k := range s.cfg.Keys {
			if j%len(ids) == i {
				share = append(share, k)
			}
		}
		at := time.Now().Add(s.randDur(s.cfg.ClaimInterval))
		s.At(at, func(context.Context) error {
			return s.join(id, func(p balance.Policy) balance.Policy { return &seeded{share: share, until: until, then: p} })
		})
	}
	return nil
}

// seeded claims a fixed share of keys until a given time, then plans by
// its own policy.
type seeded struct {
	share []string
	until time.Time
	then  balance.Policy
}

func (p *seeded) Plan(v balance.View) balance.Plan {
	if !v.Now.Before(p.until) {
		return p.then.Plan(v)
	}
	var plan balance.Plan
	owned := make(map[string]bool, len(v.Keys))
	for i, k := range v.Keys {
		if v.Owner(i) != "" {
			owned[k] = true
		}
	}
	for _, k := range p.share {
		if !owned[k] {
			plan.Claim = append(plan.Claim, k)
		}
	}
	return plan
}

func (s *Sim) randDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(s.rng.Int64N(int64(d)))
}
