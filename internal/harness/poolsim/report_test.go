package poolsim

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store/memstore"
)

// The configurations the report compares, each planned through the
// engine's pool coordinator.
var (
	reference  = ReferencePolicy(ReferenceConfig{})
	balDefault = BalancedPolicy("balanced, defaults", balance.Config{})
	balOrphan8 = BalancedPolicy("balanced, OrphanDelay 8s", balance.Config{OrphanDelay: 8 * time.Second})
)

// TestReport prints the tables of the "Pools" section of BENCHMARKS.md.
// It takes about two minutes on two cores, so it runs only when asked for
// by name:
//
//	go test ./internal/harness/poolsim -run TestReport -v
func TestReport(t *testing.T) {
	testenv.ReportOnly(t)
	type job struct {
		p    Policy
		su   Setup
		cold bool
		rows []Row
		err  error
	}
	var jobs []*job
	add := func(p Policy, su Setup) {
		jobs = append(jobs, &job{p: p, su: su}, &job{p: p, su: su, cold: true})
	}
	big := Setup{Keys: 10000, Seed: 1}
	add(reference, big)
	add(balDefault, big)
	add(balOrphan8, big)
	pushed := big
	pushed.Push = true
	add(balDefault, pushed)
	add(balOrphan8, pushed)

	// One simulation per core (go test's -parallel is GOMAXPROCS), each
	// in a synctest bubble of its own.
	t.Run("sims", func(t *testing.T) {
		for i, j := range jobs {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					if j.cold {
						var r Row
						r, j.err = ColdStart(t.Context(), j.p, j.su)
						j.rows = []Row{r}
					} else {
						j.rows, j.err = Timeline(t.Context(), j.p, j.su)
					}
				})
			})
		}
	})
	table := func(push bool) string {
		var timeline [][]Row
		var cold []Row
		for _, j := range jobs {
			if j.err != nil {
				t.Fatal(j.err)
			}
			if j.su.Push != push {
				continue
			}
			if j.cold {
				cold = append(cold, j.rows...)
			} else {
				timeline = append(timeline, j.rows)
			}
		}
		var rows []Row
		for i := range timeline[0] {
			for _, tl := range timeline {
				rows = append(rows, tl[i])
			}
		}
		return Table(append(rows, cold...))
	}
	var out strings.Builder
	fmt.Fprintf(&out, "### 10,000 keys, store without push (SQLite across processes, MySQL; the reference polls Redis)\n\n%s\n", table(false))
	fmt.Fprintf(&out, "### 10,000 keys, store with push (PostgreSQL, Redis, etcd)\n\n%s\n", table(true))

	// The case: 1,000 keys, 10 workers, one joins.
	var small []Row
	var seeds strings.Builder
	seeds.WriteString("| policy | store | rounds to ±10%, seeds 1–10 | moves (min 90), seeds 1–10 |\n|---|---|---|---|\n")
	cases := []struct {
		p    Policy
		push bool
		rows [10]Row
		errs [10]error
	}{{p: reference}, {p: balDefault}, {p: balDefault, push: true}, {p: balOrphan8}}
	t.Run("seeds", func(t *testing.T) {
		for i := range cases {
			c := &cases[i]
			for seed := range c.rows {
				t.Run(fmt.Sprint(i, seed), func(t *testing.T) {
					t.Parallel()
					synctest.Test(t, func(t *testing.T) {
						c.rows[seed], c.errs[seed] = Join(t.Context(), c.p, Setup{Keys: 1000, Seed: uint64(seed + 1), Push: c.push})
					})
				})
			}
		}
	})
	for _, c := range cases {
		var rounds, moves []string
		for seed, r := range c.rows {
			if err := c.errs[seed]; err != nil {
				t.Fatal(err)
			}
			if seed == 0 {
				if c.push {
					r.Policy += " (push)"
				}
				small = append(small, r)
			}
			n := "never"
			if k := r.RoundsToConverge(); k >= 0 {
				n = fmt.Sprint(k)
			}
			rounds, moves = append(rounds, n), append(moves, fmt.Sprint(r.Moves))
		}
		store := "polling"
		if c.push {
			store = "push"
		}
		fmt.Fprintf(&seeds, "| %s | %s | %s | %s |\n", c.p.Name, store, strings.Join(rounds, " "), strings.Join(moves, " "))
	}
	fmt.Fprintf(&out, "### 1,000 keys, 10 workers, one joins (seed 1)\n\n%s\n%s\n", Table(small), seeds.String())

	m := heldKeyMemory(t, 100_000)
	fmt.Fprintf(&out, "### Memory per held key (100,000 keys, the real engine on memstore)\n\n"+
		"| what | bytes per key |\n|---|---:|\n"+
		"| heap: key record, keeper term, run record, context, watchdog timer, map slots, key string | %.0f |\n"+
		"| runner: goroutine stack | %.0f |\n"+
		"| total | %.0f |\n", m.heap, m.stack, m.heap+m.stack)
	t.Logf("\n%s", out.String())
}

// keyMemory is the memory per held key, in bytes.
type keyMemory struct{ heap, stack float64 }

// heldKeyMemory measures, with runtime.MemStats after a GC, what the real
// engine takes per held key: a supervisor on the in-memory store holding n
// keys, each with its runner parked on its context. Heap counts the key
// record, the keeper's term, the run record with its context, timer and
// done channel, and the map slots; stack is the runner goroutine's (plus
// nothing else per key). Per key and approximate: map growth is amortized.
func heldKeyMemory(t *testing.T, n int) keyMemory {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	sup, err := tenure.New(tenure.Config{
		Store: memstore.New(memstore.Options{}), Leases: tenure.LeasesOn, TTL: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Int64
	runner := tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
		running.Add(1)
		<-ctx.Done()
		return nil
	})
	for i := range n {
		if err := sup.Set(fmt.Sprintf("acct-%06d", i), tenure.Job{Runner: runner}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	for running.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return keyMemory{heap: per(m1.HeapAlloc, m0.HeapAlloc), stack: per(m1.StackInuse, m0.StackInuse)}
}

// BenchmarkReferencePlan100kKeys50Workers is the reference policy's
// counterpart of balance.BenchmarkPlan/100kKeys50Workers.
func BenchmarkReferencePlan100kKeys50Workers(b *testing.B) {
	keys := Keys(100_000)
	var ws []balance.Worker
	for i := range 50 {
		ws = append(ws, balance.Worker{ID: WorkerID(i), Weight: 1})
	}
	owners := make([]string, len(keys))
	held := map[string]time.Time{}
	for i, k := range keys {
		owners[i] = ws[i%50].ID
		if i%50 == 0 {
			held[k] = time.Unix(0, 0)
		}
	}
	pol := NewReference(ReferenceConfig{})
	v := balance.View{Self: "w00", Now: time.Unix(1000, 0), Workers: ws, Keys: keys, Owners: balance.OwnersOf(owners), HeldSince: held}
	for b.Loop() {
		pol.Plan(v)
	}
}

// TestMemoryPerHeldKey prints the memory rows of BENCHMARKS.md alone:
//
//	go test ./internal/harness/poolsim -run TestMemoryPerHeldKey -v
func TestMemoryPerHeldKey(t *testing.T) {
	testenv.ReportOnly(t)
	m := heldKeyMemory(t, 100_000)
	t.Logf("heap %.0f B, stack %.0f B, total %.0f B per held key", m.heap, m.stack, m.heap+m.stack)
}
