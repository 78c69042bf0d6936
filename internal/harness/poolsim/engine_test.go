package poolsim

import (
	"context"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// TestTheSimulatorAgreesWithTheEngine plays a rollout, a join and a crash
// on real supervisors — package tenure's whole engine, each worker its own
// Supervisor with a Pool, on one memstore in a synctest bubble — and on
// the simulator set up alike (the same rollout, rounds in lockstep as the
// engine's are, the engine's default OrphanDelay of 1.5 rounds), and
// checks that they agree. The simulator plans with the engine's
// coordinator but plays the round itself; this keeps its round from
// drifting away from the engine's again.
func TestTheSimulatorAgreesWithTheEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eleven supervisors for eight simulated minutes")
	}
	const keys, workers = 1000, 10
	const round = 5 * time.Second
	for _, push := range []bool{false, true} {
		name := "polling"
		if push {
			name = "push"
		}
		t.Run(name, func(t *testing.T) {
			sim, err := New(Config{Keys: Keys(keys), Seed: 1, Push: push, Jitter: -1,
				NewPolicy: func(string) balance.Policy {
					return balance.NewBalanced(balance.Config{OrphanDelay: round * 3 / 2})
				}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range workers {
				sim.JoinAt(sim.Now().Add(time.Duration(i)*round/10), WorkerID(i))
			}
			if err := sim.RunFor(t.Context(), 2*time.Minute+round); err != nil {
				t.Fatal(err)
			}
			mark := sim.Mark()
			if err := sim.Join(t.Context(), WorkerID(workers)); err != nil {
				t.Fatal(err)
			}
			if err := sim.RunFor(t.Context(), 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			simStats := sim.Stats(mark, Tolerance)
			crashMark := sim.Mark()
			if err := sim.Crash(WorkerID(3)); err != nil {
				t.Fatal(err)
			}
			if err := sim.RunFor(t.Context(), time.Minute); err != nil {
				t.Fatal(err)
			}
			simCrash := sim.Stats(crashMark, Tolerance)

			synctest.Test(t, func(t *testing.T) {
				e := newEnginePool(t, Keys(keys), push)
				for i := range workers {
					e.start(WorkerID(i))
					time.Sleep(round / 10) // a rollout: one process after another
				}
				time.Sleep(2 * time.Minute)
				synctest.Wait()

				// A join: moves against the newcomer's share, and time until
				// every worker is within ±10 % of fair share for good.
				e.resetMoves()
				joined := time.Now()
				e.start(WorkerID(workers))
				converged := e.runUntilBalanced(5*time.Minute, workers+1)
				moves, minMoves := e.moveCount(), keys/(workers+1)
				t.Logf("join 10→11: engine %d moves (%.2f× the minimum %d), ±10%% after %v; simulator %d moves, ±10%% after %v",
					moves, float64(moves)/float64(minMoves), minMoves, converged.Sub(joined), simStats.Moves, simStats.Converged)
				if converged.IsZero() || simStats.Converged < 0 {
					t.Errorf("never within ±10%% of fair share after a join: engine %v, simulator %v", converged, simStats.Converged)
				}
				if moves < minMoves || math.Abs(float64(moves-simStats.Moves)) > 0.25*float64(simStats.Moves) {
					t.Errorf("a join moved %d keys on the engine and %d in the simulator (minimum %d); want within 25%% of each other", moves, simStats.Moves, minMoves)
				}

				// A crash: every key of the crashed worker owned again within
				// TTL + grace + two rounds.
				e.resetMoves()
				lost := e.crash(WorkerID(3))
				crashed := time.Now()
				time.Sleep(time.Minute)
				synctest.Wait()
				worst, unowned := e.reowned(lost, crashed)
				t.Logf("crash: %d keys, the last owned again after %v; %d moves on the engine, %d in the simulator",
					len(lost), worst, e.moveCount(), simCrash.Moves)
				// The crashed worker's keys move once each, to the worker
				// that prefers them: a view that showed them free during
				// grace would send some elsewhere first.
				if d := math.Abs(float64(e.moveCount() - simCrash.Moves)); d > 0.2*float64(simCrash.Moves) {
					t.Errorf("a crash moved %d keys on the engine and %d in the simulator; want within 20%%", e.moveCount(), simCrash.Moves)
				}
				if len(lost) == 0 || unowned > 0 || worst > 15*time.Second+5*time.Second+2*round {
					t.Errorf("after a crash %d of %d keys still unowned, the last owned again after %v; want all within 30s", unowned, len(lost), worst)
				}
				e.stopAll()
				if o := e.overlaps(); len(o) > 0 {
					t.Errorf("%d overlapping runs, first %s", len(o), o[0])
				}
			})
		})
	}
}

// enginePool is a pool of real supervisors on one memstore. Every runner
// records its span, and every acquisition passes through a tap that counts
// moves, so the figures are the engine's own.
type enginePool struct {
	t       *testing.T
	st      *memstore.Store
	keys    []string
	push    bool
	workers map[string]*engineWorker

	mu        sync.Mutex
	spans     map[string][]*span // pool key → every run, in start order
	lastOwner map[string]string  // pool key → name of its last acquirer
	moves     int
}

type engineWorker struct {
	cancel context.CancelFunc
	done   chan error
	cut    *testenv.Partition
}

type span struct {
	worker     string
	begin, end time.Time
}

func newEnginePool(t *testing.T, keys []string, push bool) *enginePool {
	return &enginePool{t: t, st: memstore.New(memstore.Options{}), keys: keys, push: push,
		workers: make(map[string]*engineWorker), spans: make(map[string][]*span), lastOwner: make(map[string]string)}
}

// start runs worker name: a supervisor with the pool, TTL 15s, grace 5s,
// a round every 5s — the simulator's timing.
func (e *enginePool) start(name string) {
	cut := &testenv.Partition{Store: e.st}
	var st store.Store = &tap{Partition: cut, pool: e}
	if e.push {
		st = pushTap{tap: st.(*tap), w: e.st}
	}
	sup, err := tenure.New(tenure.Config{Store: st, Owner: name, TTL: 15 * time.Second, Grace: 5 * time.Second,
		RenewEvery: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := sup.AddPool(tenure.Pool{Name: PoolName, Source: tenure.StaticKeys(e.keys...), RefreshEvery: time.Hour,
		Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			sp := &span{worker: name, begin: time.Now()}
			e.mu.Lock()
			e.spans[l.Key] = append(e.spans[l.Key], sp)
			e.mu.Unlock()
			<-ctx.Done()
			e.mu.Lock()
			sp.end = time.Now()
			e.mu.Unlock()
			return nil
		})}); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &engineWorker{cancel: cancel, done: make(chan error, 1), cut: cut}
	go func() { w.done <- sup.Run(ctx) }()
	e.workers[name] = w
}

// crash cuts worker name off from the store, as a process that died, and
// returns the keys it was running.
func (e *enginePool) crash(name string) []string {
	w := e.workers[name]
	w.cut.Cut.Store(true)
	var held []string
	e.mu.Lock()
	for k, runs := range e.spans {
		if last := runs[len(runs)-1]; last.worker == name && last.end.IsZero() {
			held = append(held, k)
		}
	}
	e.mu.Unlock()
	w.cancel() // its runners die with it; its releases fail
	<-w.done
	delete(e.workers, name)
	return held
}

func (e *enginePool) stopAll() {
	for name, w := range e.workers {
		w.cancel()
		<-w.done
		delete(e.workers, name)
	}
}

// running counts, per live worker, the keys whose runner runs now.
func (e *enginePool) running() map[string]int {
	out := make(map[string]int, len(e.workers))
	for name := range e.workers {
		out[name] = 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, runs := range e.spans {
		if last := runs[len(runs)-1]; last.end.IsZero() {
			out[last.worker]++
		}
	}
	return out
}

// runUntilBalanced samples every round for up to d and returns when every
// one of n workers first ran within ±10 % of fair share for good (zero if
// never).
func (e *enginePool) runUntilBalanced(d time.Duration, n int) time.Time {
	fair := float64(len(e.keys)) / float64(n)
	var since time.Time
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(5 * time.Second)
		synctest.Wait()
		ok := true
		for _, c := range e.running() {
			if math.Abs(float64(c)-fair) > Tolerance*fair {
				ok = false
			}
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
	}
	return since
}

// reowned reports how long after the crash the last of keys started a
// run elsewhere, and how many never did.
func (e *enginePool) reowned(keys []string, crashed time.Time) (worst time.Duration, unowned int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range keys {
		runs := e.spans[k]
		if last := runs[len(runs)-1]; last.begin.After(crashed) || last.begin.Equal(crashed) && last.end.IsZero() {
			worst = max(worst, last.begin.Sub(crashed))
			continue
		}
		unowned++
	}
	return worst, unowned
}

// overlaps lists every pair of runs of one key, on different workers, that
// ran at the same time.
func (e *enginePool) overlaps() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for k, runs := range e.spans {
		for i, a := range runs {
			for _, b := range runs[i+1:] {
				if a.worker != b.worker && (a.end.IsZero() || b.begin.Before(a.end)) && (b.end.IsZero() || a.begin.Before(b.end)) {
					out = append(out, k+": "+a.worker+" and "+b.worker)
				}
			}
		}
	}
	return out
}

func (e *enginePool) resetMoves() {
	e.mu.Lock()
	e.moves = 0
	e.mu.Unlock()
}

func (e *enginePool) moveCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moves
}

// tap passes calls to the store, counts a move whenever a pool key is
// acquired by another worker than its last holder, and fails every call
// once its worker has crashed (Partition.Cut).
type tap struct {
	*testenv.Partition
	pool *enginePool
}

func (t *tap) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	res, err := t.Partition.Acquire(ctx, req)
	if _, _, k, ok := poolkey.ParseKey(req.Key); ok && err == nil && res.Acquired {
		name := tenure.OwnerName(req.Owner)
		t.pool.mu.Lock()
		if prev, seen := t.pool.lastOwner[k]; seen && prev != name {
			t.pool.moves++
		}
		t.pool.lastOwner[k] = name
		t.pool.mu.Unlock()
	}
	return res, err
}

// pushTap is a tap on a store with a push channel.
type pushTap struct {
	*tap
	w store.Watcher
}

func (p pushTap) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if p.Cut.Load() {
		return nil, testenv.ErrPartitioned
	}
	return p.w.Watch(ctx, prefix)
}
