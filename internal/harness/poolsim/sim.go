// Package poolsim simulates a pool of workers sharing keys through a lease
// store, on a fake clock, so that pool policies can be compared: Tenure's
// balance.Balanced against [Reference], the reference design's policy.
//
// Each worker plans through the engine's own pool coordinator
// (internal/engine/poolcoord), which lays the pool out in the lease table, builds
// the view from the table as the engine's holder sees it (a crashed
// holder's keys count as its own until grace ends) and claims nothing
// until its membership has been held for a round. Around it the simulator
// plays the engine's round every claim interval: one batched renewal, one
// read of the whole lease table, the plan, the releases, then the claims
// in order until the store refuses one. Everything runs in one goroutine
// on a memstore whose clock only the simulator moves, so a seed replays a
// run exactly.
package poolsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/poolcoord"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// PoolName is the simulated pool's name: its keys and memberships are laid
// out in the lease table under it exactly as the engine lays out a pool's.
const PoolName = "sim"

// Config describes a simulated pool. Zero durations take the defaults of
// the engine: TTL 15s, Grace 5s, a round every 5s.
type Config struct {
	// Keys are the pool's keys, in source order.
	Keys []string
	// NewPolicy returns the policy of a new worker (or a restarted one).
	NewPolicy func(worker string) balance.Policy
	TTL       time.Duration
	Grace     time.Duration
	// ClaimInterval is the time between a worker's rounds.
	ClaimInterval time.Duration
	// Jitter delays each round by up to this much more, deterministically
	// from Seed, so workers drift against each other. Default 1s; negative
	// means none.
	Jitter time.Duration
	// MinHold is the window in which a second move of the same key counts
	// as a bounce, and a shed of a key held that briefly counts as a fresh
	// shed. Default 30s (Balanced's MinHold default).
	MinHold time.Duration
	// Seed drives round offsets and jitter.
	Seed uint64
	// NoRecheck makes workers plan only at their rounds and ignore
	// Plan.Recheck (the engine replans at Recheck).
	NoRecheck bool
	// Push models a store with a push channel (PostgreSQL, Redis, etcd,
	// memstore): every release makes every other worker read the table
	// and plan again at once, as the engine does on a Released event.
	// Without it (SQLite across processes, MySQL) workers see a release
	// only at their next round or recheck. Expiry is never pushed.
	Push bool
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
	if c.Jitter == 0 {
		c.Jitter = time.Second
	}
	if c.Jitter < 0 {
		c.Jitter = 0
	}
	if c.MinHold <= 0 {
		c.MinHold = 30 * time.Second
	}
	return c
}

// Sim is a simulated pool. It is not safe for concurrent use.
type Sim struct {
	cfg    Config
	st     *memstore.Store
	rng    *rand.Rand
	start  time.Time
	now    time.Time
	keySet map[string]bool

	workers map[string]*worker
	joined  []string // worker ids in first-join order: a stable iteration order
	events  []event
	seq     int

	keys       map[string]*keyLog
	episodes   []episode            // finished unowned spells
	crashWatch map[string]time.Time // crashed worker's key → crash time
	recoveries []episode            // crash → owned again
	samples    []Sample
	nextSample time.Time
	totals     Totals

	trace func(format string, args ...any) // tests: narrate every move
}

// worker is one simulated process.
type worker struct {
	id          string
	member      string
	memberEpoch int64
	coord       *poolcoord.Coordinator // the engine's own pool coordinator
	joinedAt    time.Time
	held        map[string]*term
	next        time.Time // next round
	recheck     time.Time // replan without renewing, when before next
	alive       bool
}

// term is a lease a worker believes it holds.
type term struct {
	epoch    int64
	since    time.Time
	deadline time.Time // last confirmed grant or renewal + TTL
}

// keyLog is the simulator's record of one key, kept from store calls.
type keyLog struct {
	holder   string    // the last owner to acquire it
	epoch    int64     // that owner's term
	expiry   time.Time // until when that term is live (release: the release time)
	ever     bool      // owned at least once
	lastMove time.Time
	moved    bool
}

type episode struct {
	key      string
	from, to time.Time
}

type event struct {
	at  time.Time
	seq int
	do  func(context.Context) error
}

// Totals are counters over a whole run. [Sim.Window] and [Sim.Stats]
// report them per window.
type Totals struct {
	Plans      int // plans made: regular rounds and rechecks
	Acquires   int
	Moves      int // acquisitions by an owner other than the key's previous one
	Bounces    int // moves of a key that had moved less than MinHold before
	Released   int // keys a policy gave back (not counting a leave)
	FreshSheds int // of those, keys held for less than MinHold
	Refusals   int // claims the store refused
	Lost       int // renewals refused
	// Overlaps counts a key held by two workers at once: the store granting
	// a key whose recorded term is still live to another owner, or a worker
	// still inside its deadline for a key the store says another owns. It
	// must stay zero.
	Overlaps int
	// Inconsistent counts keys whose live owner in the store differs from
	// the simulator's record: a bug in the simulator, not in a policy.
	Inconsistent int
}

// Sample is the keys each active worker holds at one instant.
type Sample struct {
	At     time.Time
	Counts map[string]int // active (alive, not draining) worker → live leases
}

// New returns a simulator with no workers, its clock at an arbitrary
// fixed instant.
func New(cfg Config) (*Sim, error) {
	cfg = cfg.withDefaults()
	if cfg.NewPolicy == nil {
		return nil, errors.New("poolsim: Config.NewPolicy is required")
	}
	s := &Sim{
		cfg:        cfg,
		rng:        rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		start:      time.Unix(1_700_000_000, 0).UTC(),
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
	s.now = s.start
	s.nextSample = s.start
	s.st = memstore.New(memstore.Options{Clock: func() time.Time { return s.now }})
	return s, nil
}

// Now is the simulated time.
func (s *Sim) Now() time.Time { return s.now }

// Config is the configuration in effect, defaults filled in.
func (s *Sim) Config() Config { return s.cfg }

// Store is the simulated lease store.
func (s *Sim) Store() *memstore.Store { return s.st }

// Totals are the counters since the start.
func (s *Sim) Totals() Totals { return s.totals }

// At schedules f at simulated time t (now if t is past). Events at the
// same instant run in the order they were scheduled, before any round.
func (s *Sim) At(t time.Time, f func(ctx context.Context) error) {
	s.seq++
	s.events = append(s.events, event{at: maxTime(t, s.now), seq: s.seq, do: f})
}

// RunFor advances the clock by d, running every event, round and sample
// that falls due.
func (s *Sim) RunFor(ctx context.Context, d time.Duration) error {
	end := s.now.Add(d)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, run := s.nextStep()
		if t.After(end) {
			s.now = end
			return nil
		}
		s.now = t
		if err := run(ctx); err != nil {
			return err
		}
	}
}

// nextStep finds what happens next: a scheduled event, then worker rounds
// in join order, then a sample, at the earliest instant.
func (s *Sim) nextStep() (time.Time, func(context.Context) error) {
	bestAt, best := s.nextSample, func(context.Context) error { s.sample(); return nil }
	if len(s.events) > 0 {
		i := 0
		for j, e := range s.events {
			if e.at.Before(s.events[i].at) || (e.at.Equal(s.events[i].at) && e.seq < s.events[i].seq) {
				i = j
			}
		}
		if e := s.events[i]; !e.at.After(bestAt) {
			bestAt, best = e.at, func(ctx context.Context) error {
				s.events = slices.Delete(s.events, i, i+1)
				return e.do(ctx)
			}
			return bestAt, best
		}
	}
	var pick *worker
	var pickAt time.Time
	renew := true
	for _, id := range s.joined {
		w := s.workers[id]
		if !w.alive {
			continue
		}
		at, r := w.next, true
		if !w.recheck.IsZero() && w.recheck.Before(at) {
			at, r = w.recheck, false
		}
		if pick == nil || at.Before(pickAt) {
			pick, pickAt, renew = w, at, r
		}
	}
	if pick != nil && !pickAt.After(bestAt) {
		return pickAt, func(ctx context.Context) error { return s.round(ctx, pick, renew) }
	}
	return bestAt, best
}

// Join starts worker id now: it takes its membership lease and plays its
// first round at once. A crashed or departed id may join again (a
// restart): it gets a fresh policy.
func (s *Sim) Join(ctx context.Context, id string) error {
	return s.join(ctx, id, s.now)
}

// JoinAt schedules Join(id) at t.
func (s *Sim) JoinAt(t time.Time, id string) {
	s.At(t, func(ctx context.Context) error { return s.Join(ctx, id) })
}

func (s *Sim) join(ctx context.Context, id string, firstRound time.Time) error {
	if w := s.workers[id]; w != nil && w.alive {
		return fmt.Errorf("poolsim: worker %s is already running", id)
	}
	coord, err := poolcoord.New(poolcoord.Config{Pool: PoolName, Self: id, Weight: 1, Policy: s.cfg.NewPolicy(id)})
	if err != nil {
		return fmt.Errorf("poolsim: join %s: %w", id, err)
	}
	if _, _, err := coord.SetKeys(s.cfg.Keys); err != nil {
		return fmt.Errorf("poolsim: join %s: %w", id, err)
	}
	member := coord.MemberKey()
	res, err := s.st.Acquire(ctx, store.AcquireRequest{Key: member, Owner: id, TTL: s.cfg.TTL, Grace: s.cfg.Grace, Running: true})
	if err != nil {
		return fmt.Errorf("poolsim: join %s: %w", id, err)
	}
	if !res.Acquired {
		return fmt.Errorf("poolsim: join %s: membership held by %s", id, res.Holder.Owner)
	}
	if _, seen := s.workers[id]; !seen {
		s.joined = append(s.joined, id)
	}
	s.workers[id] = &worker{
		id: id, member: member, memberEpoch: res.Epoch,
		coord:    coord,
		joinedAt: s.now,
		held:     make(map[string]*term),
		next:     firstRound,
		alive:    true,
	}
	return nil
}

// Leave stops worker id gracefully: it releases every key and its
// membership in one call.
func (s *Sim) Leave(ctx context.Context, id string) error {
	w := s.workers[id]
	if w == nil || !w.alive {
		return fmt.Errorf("poolsim: leave %s: not running", id)
	}
	terms := []store.Term{{Key: w.member, Epoch: w.memberEpoch}}
	for _, k := range sortedKeys(w.held) {
		terms = append(terms, store.Term{Key: w.coord.LeaseKey(k), Epoch: w.held[k].epoch})
	}
	if err := s.st.Release(ctx, id, terms); err != nil {
		return fmt.Errorf("poolsim: leave %s: %w", id, err)
	}
	for k, t := range w.held {
		s.released(id, k, t.epoch)
	}
	w.held, w.alive = nil, false
	s.pushed(w)
	return nil
}

// pushed makes every other running worker replan now, when the store
// pushes releases.
func (s *Sim) pushed(from *worker) {
	if !s.cfg.Push {
		return
	}
	for _, id := range s.joined {
		if w := s.workers[id]; w != from && w.alive {
			w.recheck = s.now
		}
	}
}

// Crash stops worker id without a word: its leases run out on their own.
// The keys it held are watched until someone owns them again.
func (s *Sim) Crash(id string) error {
	w := s.workers[id]
	if w == nil || !w.alive {
		return fmt.Errorf("poolsim: crash %s: not running", id)
	}
	for k := range w.held {
		s.crashWatch[k] = s.now
	}
	w.held, w.alive = nil, false
	return nil
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

// SeedEven starts the given workers holding the keys round-robin (key i
// to worker i mod n), as if a balanced pool had been running for a while:
// the start every policy would call balanced. Each worker's first round
// comes at a random offset within one claim interval.
func (s *Sim) SeedEven(ctx context.Context, ids []string) error {
	if err := s.StartAll(ctx, ids); err != nil {
		return err
	}
	for i, k := range s.cfg.Keys {
		w := s.workers[ids[i%len(ids)]]
		res, err := s.st.Acquire(ctx, store.AcquireRequest{Key: w.coord.LeaseKey(k), Owner: w.id, TTL: s.cfg.TTL, Grace: s.cfg.Grace, Running: true})
		if err != nil {
			return fmt.Errorf("poolsim: seed: %w", err)
		}
		if !res.Acquired {
			return fmt.Errorf("poolsim: seed: %s already held by %s", k, res.Holder.Owner)
		}
		s.acquired(w, k, res.Epoch)
	}
	return nil
}

// StartAll joins the workers now, each playing its first round at a
// random offset within one claim interval, as processes of one deployment
// that start at about the same time.
func (s *Sim) StartAll(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if err := s.join(ctx, id, s.now.Add(s.randDur(s.cfg.ClaimInterval))); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sim) randDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(s.rng.Int64N(int64(d)))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
