//go:build linux

package poolload

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// minHold is Pool.MinHold's default: a key is handed over to the worker
// that prefers it only once held this long.
const minHold = 30 * time.Second

// knobs size the report; each comes from a POOLLOAD_* variable.
type knobs struct {
	keys, workers int
	ttl           time.Duration // Config.TTL; a round (RenewEvery) is TTL/3
	window        time.Duration // the steady window measured
	startMax      time.Duration // how long every key may take to be held
	settleMax     time.Duration // how long the holders may take to stop moving
	stores, modes []string
}

func readKnobs(t *testing.T) knobs {
	t.Helper()
	k := knobs{
		keys: testenv.PositiveInt(t, "POOLLOAD_KEYS", 100000), workers: testenv.PositiveInt(t, "POOLLOAD_WORKERS", 10),
		ttl: testenv.PositiveDuration(t, "POOLLOAD_TTL", tenure.DefaultTTL), window: testenv.PositiveDuration(t, "POOLLOAD_WINDOW", time.Minute),
		startMax: testenv.PositiveDuration(t, "POOLLOAD_START_MAX", 15*time.Minute), settleMax: testenv.PositiveDuration(t, "POOLLOAD_SETTLE_MAX", 2*time.Minute),
		stores: envList("POOLLOAD_STORES", "postgres,redis"), modes: envList("POOLLOAD_MODES", "following,every-round"),
	}
	return k
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// fullReadEvery is each mode's Config.FullReadEvery: the default (follow
// the push channel, read the whole table once a minute), or one round
// (the whole table every round, as before pools followed the channel).
func fullReadEvery(t *testing.T, mode string, ttl time.Duration) time.Duration {
	switch mode {
	case "following":
		return 0
	case "every-round":
		return ttl / 3
	}
	t.Fatalf("unknown mode %q (following, every-round)", mode)
	return 0
}

// TestPoolLoadReport runs, for each store and mode, K keys in one pool
// over W worker processes (the test binary run again), waits until every
// key is held and the holders stop moving, and measures a steady window:
// what the store did and what each worker cost. It prints a markdown
// table. At the defaults (100,000 keys, 10 workers, TTL 15s, a 60s
// window) it takes about 15 minutes on two cores, so it runs only when
// named:
//
//	go test ./internal/harness/poolload -run TestPoolLoadReport -v -count=1 -timeout 60m
//
// POOLLOAD_KEYS, _WORKERS, _TTL, _WINDOW, _STORES (postgres,redis),
// _MODES (following,every-round), _START_MAX, _SETTLE_MAX, _REDIS_URL and
// _KEYS_POSTGRES or _KEYS_REDIS (a store's own key count) change it.
func TestPoolLoadReport(t *testing.T) {
	testenv.ReportOnly(t)
	k := readKnobs(t)
	began := time.Now()
	loadBefore := loadAvg()
	var rows []*row
	var notes []string
	for _, name := range k.stores {
		t.Run(name, func(t *testing.T) {
			var srv *server
			switch name {
			case "postgres":
				srv = postgresServer(t)
			case "redis":
				srv = redisServer(t)
			default:
				t.Fatalf("unknown store %q (postgres, redis)", name)
			}
			notes = append(notes, srv.note)
			for _, mode := range k.modes {
				t.Run(mode, func(t *testing.T) {
					r := runMode(t, k, srv, mode)
					rows = append(rows, r)
				})
			}
		})
	}
	fmt.Print(formatReport(k, rows, notes, began, loadBefore, loadAvg()))
}

// row is one store and mode's figures.
type row struct {
	store, mode    string
	keys, workers  int
	fullReadEvery  time.Duration
	startup        time.Duration // workers started → every key held
	settled        time.Duration // every key held → the window began
	unsettled      bool          // holders still moved when settleMax ran out
	storeWindow    time.Duration
	vals           map[string]float64
	storeCPU       time.Duration
	workerWindow   time.Duration
	cpu            []time.Duration
	atHeld         []sample // when every key was first held (or the start gave up)
	neverHeld      int64    // keys held when the start gave up; 0 if every key was
	startRoundMax  time.Duration
	startRenewMax  time.Duration
	start, end, gc []sample
	listed         int    // keys the store shows held after the window
	mismatch       string // holders the store shows that workers do not run, or the reverse
	stop           time.Duration
	load           string
}

func runMode(t *testing.T, k knobs, srv *server, mode string) *row {
	fre := fullReadEvery(t, mode, k.ttl)
	// POOLLOAD_KEYS_POSTGRES, _REDIS: a store's own key count.
	k.keys = testenv.PositiveInt(t, "POOLLOAD_KEYS_"+strings.ToUpper(srv.name), k.keys)
	sp := srv.newSpace(t)
	specs := make([]childSpec, k.workers)
	for i := range specs {
		specs[i] = childSpec{Index: i, Store: srv.name, URL: srv.url, Space: sp.name, Keys: k.keys, TTL: k.ttl, FullReadEvery: fre}
	}
	r := &row{store: srv.name, mode: mode, keys: k.keys, workers: k.workers, fullReadEvery: fre}
	began := time.Now()
	ws := startWorkers(t, specs)

	// Until every key is held, from the workers' own counts: a List of
	// every key every few seconds would load the store being measured.
	// A start that never holds every key is a finding, not a failure of
	// the harness: the row says so and the rest is measured all the same.
	lastLog := time.Now()
	for {
		ss, err := sampleAll(ws, "sample")
		if err != nil {
			t.Fatal(err)
		}
		r.atHeld = ss
		for _, s := range ss {
			r.startRoundMax = max(r.startRoundMax, s.RoundMax)
			r.startRenewMax = max(r.startRenewMax, s.RenewMax)
		}
		held := heldOf(ss)
		if sum(held) == int64(k.keys) {
			break
		}
		if time.Since(began) > k.startMax {
			r.neverHeld = sum(held)
			t.Logf("only %d of %d keys held after %v: %v; measuring all the same", sum(held), k.keys, k.startMax, held)
			break
		}
		if time.Since(lastLog) > 15*time.Second {
			t.Logf("%v: %d of %d keys held %v", time.Since(began).Round(time.Second), sum(held), k.keys, held)
			lastLog = time.Now()
		}
		time.Sleep(time.Second)
	}
	r.startup = time.Since(began)
	if r.neverHeld == 0 {
		t.Logf("every key held after %v", r.startup.Round(100*time.Millisecond))
	}

	// Settled: at least MinHold after every key was held, and then no
	// worker acquired a key over three rounds (four samples a round
	// apart). A start that takes longer than a round leaves keys on
	// workers that do not prefer them, and those are handed over only
	// once held for MinHold; equal counts alone are no sign, since a
	// hand-over each way leaves them as they were.
	allHeld := time.Now()
	var prev [][]int64
	var acq []int64
	for {
		ss, err := sampleAll(ws, "sample")
		if err != nil {
			t.Fatal(err)
		}
		prev = append(prev, heldOf(ss))
		acq = append(acq, sum(acquiredOf(ss)))
		if n := len(prev); n >= 4 && acq[n-1] == acq[n-4] && sum(prev[n-1]) == int64(k.keys) && time.Since(allHeld) >= minHold {
			break
		}
		if time.Since(allHeld) > k.settleMax {
			r.unsettled = true
			t.Logf("holders still move after %v: %v", k.settleMax, prev[len(prev)-3:])
			break
		}
		time.Sleep(k.ttl / 3)
	}
	r.settled = time.Since(allHeld)
	t.Logf("settled after %v more: %v; measuring %v", r.settled.Round(100*time.Millisecond), prev[len(prev)-1], k.window)

	// The window: the store's counters and the workers' samples, taken
	// together at each end.
	ctx, cancel := context.WithTimeout(context.Background(), k.window+2*time.Minute)
	defer cancel()
	s0, w0 := readBoth(t, ctx, sp, ws)
	time.Sleep(k.window)
	s1, w1 := readBoth(t, ctx, sp, ws)
	r.vals, r.storeCPU = s1.delta(s0)
	r.storeWindow = s1.at.Sub(s0.at)
	r.workerWindow = w1.at.Sub(w0.at)
	r.start, r.end = w0.s, w1.s
	for i := range ws {
		r.cpu = append(r.cpu, w1.s[i].CPU-w0.s[i].CPU)
	}
	var err error
	if r.gc, err = sampleAll(ws, "gc"); err != nil {
		t.Fatal(err)
	}
	r.load = loadAvg()

	// What the store shows, against what the workers run. A key being
	// handed over shows on neither side or both for a moment, so a
	// difference counts only if it lasts three tries a round apart. A
	// worker that runs more keys than the store shows it holding would
	// run a key without its lease: that fails the test. Leases without
	// runners (acquired, not started yet; stopped, release failed) are
	// only reported.
	for try := 0; ; try++ {
		var unsafe bool
		r.listed, r.mismatch, unsafe = compareHolders(t, ctx, sp, ws)
		if r.listed == k.keys && r.mismatch == "" {
			break
		}
		if try == 2 {
			if unsafe {
				t.Errorf("a worker runs more keys than the store shows it holding: %s", r.mismatch)
			}
			t.Logf("after the window the store shows %d of %d keys held; %s", r.listed, k.keys, r.mismatch)
			break
		}
		t.Logf("the store shows %d of %d keys held; %s; again in a round", r.listed, k.keys, r.mismatch)
		time.Sleep(k.ttl / 3)
	}
	for _, w := range ws {
		if w1.s[w.spec.Index].LogLines > 0 {
			t.Logf("w%02d logged %d warnings; the first:\n%s", w.spec.Index, w1.s[w.spec.Index].LogLines, w.logHead(1500))
			break
		}
	}

	// A graceful shutdown of all at once: each releases its keys.
	stopAt := time.Now()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			if err := w.stop(90 * time.Second); err != nil {
				t.Errorf("w%02d: %v", w.spec.Index, err)
			}
		})
	}
	wg.Wait()
	r.stop = time.Since(stopAt)
	t.Logf("stopped in %v", r.stop.Round(100*time.Millisecond))
	return r
}

// compareHolders lists the pool's keys from the store and compares each
// worker's count with the runners it runs.
func compareHolders(t *testing.T, ctx context.Context, sp *space, ws []*worker) (listed int, mismatch string, unsafe bool) {
	t.Helper()
	ls, err := sp.lister.List(ctx, tenure.PoolPrefix+poolName+"/")
	if err != nil {
		t.Fatal(err)
	}
	byOwner := map[string]int64{}
	for _, l := range ls {
		if l.HeldOrInGrace(tenure.DefaultGrace) {
			byOwner[tenure.OwnerName(l.Owner)]++
			listed++
		}
	}
	after, err := sampleAll(ws, "sample")
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for i, s := range after {
		if n := byOwner[fmt.Sprintf("w%02d", i)]; n != s.Held {
			diffs = append(diffs, fmt.Sprintf("w%02d runs %d, the store shows %d", i, s.Held, n))
			unsafe = unsafe || s.Held > n
		}
	}
	return listed, strings.Join(diffs, "; "), unsafe
}

type workerReading struct {
	at time.Time
	s  []sample
}

// readBoth reads the store's counters and samples every worker at once.
func readBoth(t *testing.T, ctx context.Context, sp *space, ws []*worker) (storeStats, workerReading) {
	t.Helper()
	var (
		st   storeStats
		serr error
		wg   sync.WaitGroup
	)
	wg.Go(func() { st, serr = sp.stats(ctx) })
	at := time.Now()
	ss, err := sampleAll(ws, "sample")
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return st, workerReading{at: at, s: ss}
}

func heldOf(ss []sample) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = s.Held
	}
	return out
}

func acquiredOf(ss []sample) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = s.Acquired
	}
	return out
}

func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
