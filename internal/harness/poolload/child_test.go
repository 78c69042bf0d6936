//go:build linux

package poolload

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
)

// childEnv, when set, makes the test binary a worker process (see
// TestMain): its value is the JSON of a childSpec.
const childEnv = "TENURE_POOLLOAD_CHILD"

// poolName is the pool every worker runs.
const poolName = "load"

// childSpec is what a worker process runs.
type childSpec struct {
	Index         int           // w00, w01, …: the owner name
	Store         string        // "postgres" or "redis"
	URL           string        // the server, with its database
	Space         string        // the table (PostgreSQL) or namespace (Redis)
	Keys          int           // the pool's keys: k000000 … k(Keys-1)
	TTL           time.Duration // Config.TTL; RenewEvery is TTL/3
	FullReadEvery time.Duration // Config.FullReadEvery
}

// sample is one answer of a worker to "sample" or "gc" on its stdin.
// Counters run from the worker's start; maxima since the previous sample.
type sample struct {
	Held       int64 // runners running, which is the keys held
	HeapInuse  uint64
	StackInuse uint64
	HeapAlloc  uint64
	// Before is the heap after GC before the supervisor ran (the store's
	// client, the source's keys, the runtime); Runner, in a sample after
	// GC only, the heap an idle goroutine takes (testenv.IdleGoroutineHeap),
	// as each runner's does: both are set apart from Tenure's own heap.
	Before     uint64
	Runner     float64
	RSS        uint64
	CPU        time.Duration // user + system, from getrusage
	Goroutines int

	Acquired   int64            // new terms
	Handovers  map[string]int64 // by cause (tenure.Handover*)
	Unconfirm  int64            // renewal outcomes "unconfirmed"
	Deadline   int64            // runners stopped at their lease's safety deadline
	Rounds     int64
	RoundTotal time.Duration
	RoundMax   time.Duration
	Renewals   int64 // batched renewal calls
	RenewTotal time.Duration
	RenewMax   time.Duration
	LogLines   int64 // warnings and errors logged
	Calls      callStats
	Err        string
}

// callStats counts a worker's store calls, client side (countedStore).
type callStats struct {
	Acquires, Renews, Releases, Lists int64
	AcquireTime, RenewTime, ListTime  time.Duration
	ListRows                          int64
	Refused                           int64    // acquisitions a holder blocked
	RefusedLast                       []string // the last few: key, holder, its time left
}

// countedStore counts and times the calls the engine makes. It passes
// every call through unchanged and keeps the push channel: the engine
// looks for no other optional interface (store.Watcher is the one).
type countedStore struct {
	inner interface {
		store.Store
		store.Watcher
	}
	acquires, renews, releases, lists atomic.Int64
	acquireNS, renewNS, listNS        atomic.Int64
	listRows                          atomic.Int64
	refused                           atomic.Int64
	mu                                sync.Mutex
	refusedLast                       []string
	// reading is held, shared, through every List, so that a sample
	// after GC can wait until none is in flight: a whole read's answer
	// (100,000 leases, half a second on Redis) is garbage a moment later,
	// and was counted as the worker's heap when a sample caught it.
	reading sync.RWMutex
}

func (c *countedStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	start := time.Now()
	res, err := c.inner.Acquire(ctx, req)
	c.acquires.Add(1)
	c.acquireNS.Add(int64(time.Since(start)))
	if err == nil && !res.Acquired {
		c.refused.Add(1)
		h := res.Holder
		c.mu.Lock()
		c.refusedLast = append(c.refusedLast, fmt.Sprintf("%s held by %s epoch %d live %v time left %v", req.Key, h.Owner, h.Epoch, h.Live, h.TimeLeft.Round(time.Millisecond)))
		if len(c.refusedLast) > 3 {
			c.refusedLast = c.refusedLast[1:]
		}
		c.mu.Unlock()
	}
	return res, err
}

func (c *countedStore) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	start := time.Now()
	defer func() { c.renews.Add(1); c.renewNS.Add(int64(time.Since(start))) }()
	return c.inner.Renew(ctx, owner, ttl, items)
}

func (c *countedStore) Release(ctx context.Context, owner string, terms []store.Term) error {
	c.releases.Add(1)
	return c.inner.Release(ctx, owner, terms)
}

func (c *countedStore) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	c.reading.RLock()
	defer c.reading.RUnlock()
	start := time.Now()
	ls, err := c.inner.List(ctx, prefix)
	c.lists.Add(1)
	c.listNS.Add(int64(time.Since(start)))
	c.listRows.Add(int64(len(ls)))
	return ls, err
}

func (c *countedStore) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	return c.inner.Watch(ctx, prefix)
}

func (c *countedStore) stats() callStats {
	return callStats{
		Acquires: c.acquires.Load(), Renews: c.renews.Load(), Releases: c.releases.Load(), Lists: c.lists.Load(),
		AcquireTime: time.Duration(c.acquireNS.Load()), RenewTime: time.Duration(c.renewNS.Load()),
		ListTime: time.Duration(c.listNS.Load()), ListRows: c.listRows.Load(),
		Refused: c.refused.Load(), RefusedLast: c.lastRefusals(),
	}
}

func (c *countedStore) lastRefusals() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.refusedLast)
}

// keyName is key i of the pool; every worker builds the same list.
func keyName(i int) string { return fmt.Sprintf("k%06d", i) }

// counters is the worker's Observer: atomics only, since the engine calls
// it with its lock held, 10,000 times a round for Renewal.
type counters struct {
	tenure.NopObserver
	acquired, unconfirmed, deadline   atomic.Int64
	rounds, roundNS, roundMax         atomic.Int64
	renewals, renewNS, renewMax       atomic.Int64
	released, rebalance, lost, expiry atomic.Int64
	other                             atomic.Int64
}

func storeMax(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

func (c *counters) Acquired()     { c.acquired.Add(1) }
func (c *counters) DeadlineStop() { c.deadline.Add(1) }
func (c *counters) Renewal(outcome string) {
	if outcome == "unconfirmed" {
		c.unconfirmed.Add(1)
	}
}
func (c *counters) Round(d time.Duration) {
	c.rounds.Add(1)
	c.roundNS.Add(int64(d))
	storeMax(&c.roundMax, int64(d))
}
func (c *counters) RenewalCall(d time.Duration) {
	c.renewals.Add(1)
	c.renewNS.Add(int64(d))
	storeMax(&c.renewMax, int64(d))
}
func (c *counters) Handover(cause string) {
	switch cause {
	case tenure.HandoverReleased:
		c.released.Add(1)
	case tenure.HandoverRebalance:
		c.rebalance.Add(1)
	case tenure.HandoverLost:
		c.lost.Add(1)
	case tenure.HandoverExpired:
		c.expiry.Add(1)
	default:
		c.other.Add(1)
	}
}

// countingWriter counts the log lines a worker writes (it logs warnings
// and errors only) and passes them on.
type countingWriter struct {
	n  atomic.Int64
	mu sync.Mutex
	w  *os.File
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(strings.Count(string(p), "\n")))
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w.Write(p)
}

// runChild is a worker process's main; it returns the exit code. It
// answers each line of stdin ("sample", or "gc" to collect garbage first)
// with one JSON sample on stdout, and shuts down gracefully (releasing
// its keys) at the end of stdin — which also comes when the parent dies.
func runChild(raw string) int {
	var sp childSpec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "worker spec:", err)
		return 2
	}
	// POOLLOAD_CPUPROFILE=path profiles the first worker's whole life,
	// to find where a worker's time goes.
	if path := os.Getenv("POOLLOAD_CPUPROFILE"); path != "" && sp.Index == 0 {
		if f, err := os.Create(path); err == nil {
			defer f.Close()
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile() // before the Close above
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, closeStore, err := openChildStore(ctx, sp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer closeStore()

	logs := &countingWriter{w: os.Stderr}
	obs := &counters{}
	cs := &countedStore{inner: st}
	sup, err := tenure.New(tenure.Config{
		Store: cs, Leases: tenure.LeasesOn, Owner: fmt.Sprintf("w%02d", sp.Index),
		TTL: sp.TTL, FullReadEvery: sp.FullReadEvery, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	keys := make([]string, sp.Keys)
	for i := range keys {
		keys[i] = keyName(i)
	}
	var held atomic.Int64
	err = sup.AddPool(tenure.Pool{
		Name: poolName, Source: tenure.StaticKeys(keys...),
		// The cheapest runner there is: what is measured is the engine.
		Runner: tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
			held.Add(1)
			defer held.Add(-1)
			<-ctx.Done()
			return nil
		}),
	})
	keys = nil
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()

	enc := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		s := sampleOf(in.Text() == "gc", sp.Index, &held, obs, logs, cs)
		s.Before = before.HeapAlloc
		select {
		case err := <-done:
			s.Err = fmt.Sprintf("Run returned early: %v", err)
			_ = enc.Encode(s)
			return 1
		default:
		}
		if err := enc.Encode(s); err != nil {
			break // the parent is gone
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker Run:", err)
			return 1
		}
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "worker: Run did not return within 60s of shutdown")
		return 1
	}
	return 0
}

// writeHeapProfile writes the first worker's heap profile to
// POOLLOAD_HEAPPROFILE, when set: where its memory per held key goes.
func writeHeapProfile(index int) {
	path := os.Getenv("POOLLOAD_HEAPPROFILE")
	if path == "" || index != 0 {
		return
	}
	if f, err := os.Create(path); err == nil {
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
}

// openChildStore opens the worker's store as an application would.
func openChildStore(ctx context.Context, sp childSpec) (interface {
	store.Store
	store.Watcher
}, func(), error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch sp.Store {
	case "postgres":
		s, err := postgres.Open(octx, sp.URL, postgres.Options{Table: sp.Space})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = s.Close() }, nil
	case "redis":
		s, err := redis.Open(octx, sp.URL, redis.Options{Namespace: sp.Space})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = s.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", sp.Store)
}

// sampleOf takes a sample, after GC with no read in flight if afterGC
// (and then also what an idle goroutine takes).
func sampleOf(afterGC bool, index int, held *atomic.Int64, c *counters, logs *countingWriter, cs *countedStore) sample {
	if !afterGC {
		s := takeSample(held, c, logs)
		s.Calls = cs.stats()
		return s
	}
	cs.reading.Lock()
	defer cs.reading.Unlock()
	runtime.GC()
	writeHeapProfile(index)
	s := takeSample(held, c, logs)
	s.Calls = cs.stats()
	s.Runner = testenv.IdleGoroutineHeap(int(s.Held))
	return s
}

func takeSample(held *atomic.Int64, c *counters, logs *countingWriter) sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return sample{
		Held: held.Load(), HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse, HeapAlloc: ms.HeapAlloc,
		RSS: selfRSS(), CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), Goroutines: runtime.NumGoroutine(),
		Acquired: c.acquired.Load(), Unconfirm: c.unconfirmed.Load(), Deadline: c.deadline.Load(),
		Handovers: map[string]int64{
			tenure.HandoverReleased: c.released.Load(), tenure.HandoverRebalance: c.rebalance.Load(),
			tenure.HandoverLost: c.lost.Load(), tenure.HandoverExpired: c.expiry.Load(), "other": c.other.Load(),
		},
		Rounds: c.rounds.Load(), RoundTotal: time.Duration(c.roundNS.Load()), RoundMax: time.Duration(c.roundMax.Swap(0)),
		Renewals: c.renewals.Load(), RenewTotal: time.Duration(c.renewNS.Load()), RenewMax: time.Duration(c.renewMax.Swap(0)),
		LogLines: logs.n.Load(),
	}
}

// selfRSS is the resident set from /proc/self/statm, in bytes.
func selfRSS() uint64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}
