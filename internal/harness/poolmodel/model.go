// Package poolmodel runs Tenure's pool policy at a scale the engine-level
// simulator (internal/harness/poolsim) cannot reach on one machine: a
// million keys over a hundred workers.
//
// poolsim runs whole supervisors, each with its own view of every key, so
// a hundred of them at a million keys need tens of gigabytes. Here each
// worker is only what decides: its own balance.Balanced, the policy every
// engine runs, planning from the lease table at its own round times. The
// engine around it is modelled, not run: one lease table shared by all,
// rounds that renew a worker's leases and plan, claims the table grants
// when the key is free, releases that free a key at once, crashed
// workers' leases that expire TTL after their last renewal and stay
// blocked for Grace, and a worker that claims nothing in its first round
// (the engine's Settled). There are no store calls, no latency and no
// push channel: a worker sees a release at its next round or recheck, as
// on a store without push (SQLite across processes, MySQL).
//
// So its figures are the policy's, under the engine's timing: moves,
// convergence, unowned spells and crash recovery. Safety (no key run
// twice) is the engine's and the store's, and poolsim and the chaos
// harness check it; a model that grants each key to one owner by
// construction cannot.
package poolmodel

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

// Config describes a modelled pool. Zero durations take the engine's
// defaults: TTL 15s, Grace 5s, a round every 5s, OrphanDelay 1.5 rounds.
type Config struct {
	Keys  int
	TTL   time.Duration
	Grace time.Duration
	Round time.Duration
	// Balance tunes the policy; a zero OrphanDelay takes the engine's
	// default of 1.5 rounds.
	Balance balance.Config
	// MinHold is the window in which a second move of a key counts as a
	// bounce. Default 30s, Balanced's default MinHold.
	MinHold time.Duration
	// Seed drives the workers' round offsets.
	Seed uint64
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = 15 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 5 * time.Second
	}
	if c.Round <= 0 {
		c.Round = 5 * time.Second
	}
	if c.Balance.OrphanDelay <= 0 {
		c.Balance.OrphanDelay = c.Round * 3 / 2
	}
	if c.MinHold <= 0 {
		c.MinHold = 30 * time.Second
	}
	return c
}

// epoch is the model's time zero; times inside are durations since it.
var epoch = time.Unix(1_000_000, 0)

const none = -1

// Model is a pool of workers sharing Keys through one lease table.
type Model struct {
	cfg  Config
	rng  *rand.Rand
	now  time.Duration
	keys []string

	// The lease table, position for position with keys: each key's
	// holder by its number (worker.number; 0 when free), with every
	// worker's id by index in IDs. It is the policy's View.Owners, shared
	// by every plan, as every worker would read the same table at the
	// same instant.
	owners   balance.Owners
	acquired []time.Duration

	// What the runs did, per key: the last worker that ran it (none if
	// never), since when it runs nowhere (none while it runs), when it
	// last moved and when its runner crashed (none if it did not, or it
	// has run again since).
	lastRunner   []int32
	idleSince    []time.Duration
	lastMove     []time.Duration
	crashedSince []time.Duration

	workers []*worker
	byID    map[string]int32
	rounds  roundQueue
	expiry  []expiring // crashed workers' leases, freed in order of due
	samples []Sample

	totals Totals
	spells spells
}

// worker is one process. A restarted worker is a new worker under the same
// id: a fresh policy, a new membership.
type worker struct {
	idx    int32
	id     string
	policy *balance.Balanced
	up     bool
	// memberUntil is when the membership lease stops being live: never
	// while up; TTL after the last renewal once crashed.
	memberUntil time.Duration
	joined      time.Duration
	lastRenew   time.Duration
	recheck     time.Duration // when the policy asked to plan again; none if not
	held        int
}

// number is the worker's number in the lease table (Model.owners): its
// index plus one, as 0 is a free key.
func (w *worker) number() int32 { return w.idx + 1 }

// Totals are counters over a whole run.
type Totals struct {
	Plans    int // policy plans, rounds and rechecks
	Claims   int // claims the table granted
	Refused  int // claims of a key someone held
	Released int // keys a policy released (not a leave's)
	Moves    int // runs started on another worker than the key's last
	Bounces  int // moves of a key that had moved less than MinHold before
	// PlanTime is the wall time spent in the policies' plans.
	PlanTime time.Duration
}

// expiring is a crashed worker's lease, freed at due.
type expiring struct {
	key int
	due time.Duration
}

// Sample is the keys each active worker holds at one instant, and how
// many keys run nowhere.
type Sample struct {
	At      time.Duration
	Counts  map[string]int
	Unowned int
}

// New returns a model of cfg.Keys keys and no workers.
func New(cfg Config) (*Model, error) {
	cfg = cfg.withDefaults()
	if cfg.Keys <= 0 {
		return nil, fmt.Errorf("poolmodel: Keys must be positive, got %d", cfg.Keys)
	}
	m := &Model{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), byID: map[string]int32{}}
	m.keys = make([]string, cfg.Keys)
	for i := range m.keys {
		m.keys[i] = fmt.Sprintf("acct-%07d", i)
	}
	m.owners.Of = make([]int32, cfg.Keys)
	m.acquired = make([]time.Duration, cfg.Keys)
	m.lastRunner = make([]int32, cfg.Keys)
	m.idleSince = make([]time.Duration, cfg.Keys)
	m.lastMove = make([]time.Duration, cfg.Keys)
	m.crashedSince = make([]time.Duration, cfg.Keys)
	for i := range m.keys {
		m.lastRunner[i] = none
		m.lastMove[i], m.crashedSince[i] = none, none
	}
	return m, nil
}

// Now is the model's time since it started.
func (m *Model) Now() time.Duration { return m.now }

// Config is the configuration in effect, defaults filled in.
func (m *Model) Config() Config { return m.cfg }

// Totals are the counters since the start.
func (m *Model) Totals() Totals { return m.totals }

// Join starts a worker under id now; its first round is now, and it plans
// from its second. An id that left may join again; a crashed one once its
// membership and leases have run out (the engine gives a restarted
// process a new id, so its old leases are never taken for its own).
func (m *Model) Join(id string) error {
	_, err := m.join(id, m.now, m.now)
	return err
}

// join starts a worker under id, a member since joined, with its first
// round at first.
func (m *Model) join(id string, joined, first time.Duration) (*worker, error) {
	if i, ok := m.byID[id]; ok {
		if old := m.workers[i]; old.up || old.held > 0 || m.now < old.memberUntil {
			return nil, fmt.Errorf("poolmodel: worker %s is still up or holds leases", id)
		}
	}
	w := &worker{idx: int32(len(m.workers)), id: id, up: true, joined: joined, recheck: none,
		policy: balance.NewBalanced(m.cfg.Balance)}
	m.workers = append(m.workers, w)
	m.owners.IDs = append(m.owners.IDs, id)
	m.byID[id] = w.idx
	heap.Push(&m.rounds, round{at: first, who: w.idx})
	return w, nil
}

// Steady starts workers ids in the policy's steady state: members since
// long ago, each holding the keys it is preferred for, held past MinHold,
// with rounds at random offsets within one round.
func (m *Model) Steady(ids []string) error {
	var ws []balance.Worker
	for _, id := range ids {
		first := m.now + time.Duration(m.rng.Int64N(int64(m.cfg.Round)))
		if _, err := m.join(id, m.now-time.Hour, first); err != nil {
			return err
		}
		ws = append(ws, balance.Worker{ID: id, Weight: 1})
	}
	for i, id := range balance.Preferred(ws, m.keys) {
		w := m.workers[m.byID[id]]
		m.grant(i, w)
		m.acquired[i] = m.now - time.Hour
		m.lastRunner[i] = w.idx
	}
	return nil
}

// Leave stops worker id gracefully now: it releases every key and its
// membership, as a closing supervisor does.
func (m *Model) Leave(id string) error {
	w, err := m.upWorker(id)
	if err != nil {
		return err
	}
	w.up, w.memberUntil = false, m.now
	for i, n := range m.owners.Of {
		if n == w.number() {
			m.free(i)
		}
	}
	return nil
}

// Crash stops worker id now without a word: its runners stop, its leases
// run out TTL after its last renewal and stay blocked for Grace.
func (m *Model) Crash(id string) error {
	w, err := m.upWorker(id)
	if err != nil {
		return err
	}
	w.up, w.memberUntil = false, w.lastRenew+m.cfg.TTL
	for i, n := range m.owners.Of {
		if n != w.number() {
			continue
		}
		m.idleSince[i], m.crashedSince[i] = m.now, m.now
		m.expiry = append(m.expiry, expiring{key: i, due: max(w.lastRenew, m.acquired[i]) + m.cfg.TTL + m.cfg.Grace})
	}
	return nil
}

func (m *Model) upWorker(id string) (*worker, error) {
	i, ok := m.byID[id]
	if !ok || !m.workers[i].up {
		return nil, fmt.Errorf("poolmodel: worker %s is not up", id)
	}
	return m.workers[i], nil
}

// Held is how many keys the worker up under id holds; 0 if none is up.
func (m *Model) Held(id string) int {
	if i, ok := m.byID[id]; ok && m.workers[i].up {
		return m.workers[i].held
	}
	return 0
}

// Active are the ids of the workers that are up, in join order.
func (m *Model) Active() []string {
	var out []string
	for _, w := range m.workers {
		if w.up {
			out = append(out, w.id)
		}
	}
	return out
}

// RunFor runs every round, recheck, expiry and sample that falls due in
// the next d.
func (m *Model) RunFor(d time.Duration) {
	end := m.now + d
	for {
		next := m.nextSample()
		if len(m.rounds) > 0 && m.rounds[0].at < next {
			next = m.rounds[0].at
		}
		if next > end {
			m.now = end
			return
		}
		m.now = next
		m.expire()
		if len(m.rounds) > 0 && m.rounds[0].at == m.now {
			r := heap.Pop(&m.rounds).(round)
			m.runRound(r)
			continue
		}
		m.sample()
	}
}

func (m *Model) nextSample() time.Duration {
	if len(m.samples) == 0 {
		return m.now
	}
	return m.samples[len(m.samples)-1].At + m.cfg.Round
}

// expire frees the crashed workers' leases whose grace has ended.
func (m *Model) expire() {
	kept := m.expiry[:0]
	for _, e := range m.expiry {
		if e.due <= m.now {
			m.free(e.key)
		} else {
			kept = append(kept, e)
		}
	}
	m.expiry = kept
}

// sample records each active worker's keys.
func (m *Model) sample() {
	s := Sample{At: m.now, Counts: map[string]int{}, Unowned: len(m.keys)}
	for _, w := range m.workers {
		if w.up {
			s.Counts[w.id] = w.held
			s.Unowned -= w.held
		}
	}
	m.samples = append(m.samples, s)
}
