package poolsim

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

var poolHeapProfile = flag.String("poolheap", "", "TestPoolMemoryPerHeldKey writes a heap profile of the settled worker to this file, and one after a few rounds to this file + \".rounds\"")

// copyingStore is memstore as a network store looks to its client: every
// List answers with keys and owners decoded into strings of their own, so
// the worker's view does not share the store's strings (which a database
// driver never lets it do) and is measured at its real size.
type copyingStore struct{ *memstore.Store }

func (s copyingStore) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	leases, err := s.Store.List(ctx, prefix)
	for i := range leases {
		leases[i].Key, leases[i].Owner = strings.Clone(leases[i].Key), strings.Clone(leases[i].Owner)
	}
	return leases, err
}

// TestPoolMemoryPerHeldKey measures Tenure's heap per held key of one pool
// worker among ten sharing 100,000 keys: one real supervisor, and nine
// peers that are only their memberships and their 10,000 leases each, put
// straight into the store, so the worker settles at the 10,000 keys
// nobody holds. The store and the source's keys are made before the first
// reading, so the figure is the worker's own heap: its view of the whole
// table, the coordinator and the policy (per pool key) and its held keys'
// records and runs (per held key). The runner goroutines are the user's
// work, which any way of running it takes, and are reported apart: their
// stacks, and their descriptors and waits, measured as the heap that as
// many goroutines waiting on a channel take. It takes about twenty seconds:
//
//	go test ./internal/harness/poolsim -run TestPoolMemoryPerHeldKey -v [-poolheap heap.out]
//	go tool pprof -sample_index=inuse_space -top heap.out
//
// and what the rounds allocate, from a second profile taken after them:
//
//	go tool pprof -sample_index=alloc_space -top -base heap.out heap.out.rounds
func TestPoolMemoryPerHeldKey(t *testing.T) {
	testenv.ReportOnly(t)
	const n, workers = 100_000, 10
	runtime.MemProfileRate = 4096
	keys := Keys(n)
	ms := memstore.New(memstore.Options{})
	// Worker 0's membership and share are released already, so the store
	// holds a record of every key before the reading and none is made
	// after, and its index of them is made by a first read: the store's
	// memory is not the worker's.
	for w := range workers {
		ms.Put(store.Lease{Key: poolkey.Member{Pool: PoolName, Owner: WorkerID(w), Weight: 1}.Key(),
			Owner: WorkerID(w), Epoch: 1, Running: true, TimeLeft: time.Hour, Released: w == 0})
	}
	for i, k := range keys {
		l := store.Lease{Key: poolkey.Key("", PoolName, k), Owner: WorkerID(i % workers), Epoch: 1, Running: true, TimeLeft: time.Hour}
		l.Released = i%workers == 0
		ms.Put(l)
	}
	if _, err := ms.List(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	source := tenure.StaticKeys(keys...)

	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	sup, err := tenure.New(tenure.Config{
		Store: copyingStore{ms}, Leases: tenure.LeasesOn, Owner: WorkerID(0),
		TTL: 3 * time.Second, Grace: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Int64
	err = sup.AddPool(tenure.Pool{Name: PoolName, Source: source, RefreshEvery: time.Hour,
		Runner: tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// Settled: the running count has not moved for a few rounds.
	start, last, since := time.Now(), int64(-1), time.Now()
	for time.Since(since) < 5*time.Second {
		time.Sleep(100 * time.Millisecond)
		if r := running.Load(); r != last || r < n/workers*9/10 {
			last, since = r, time.Now()
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("not settled after two minutes: %d keys running", last)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	held := float64(running.Load())
	heap := (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / held
	stack := (float64(m1.StackInuse) - float64(m0.StackInuse)) / held
	writeHeapProfile(t, *poolHeapProfile)
	// What the settled worker allocates per round (RenewEvery is 1s):
	// garbage the collector must keep up with, and headroom the heap
	// grows by between collections.
	const window = 5 * time.Second
	time.Sleep(window)
	var m2 runtime.MemStats
	runtime.ReadMemStats(&m2)
	t.Logf("allocates %.1f MB per round while settled", float64(m2.TotalAlloc-m1.TotalAlloc)/1e6/window.Seconds())
	if *poolHeapProfile != "" {
		writeHeapProfile(t, *poolHeapProfile+".rounds")
	}
	// Last, as it allocates what the rounds above must not count.
	runner := testenv.IdleGoroutineHeap(int(held))
	t.Logf("settled in %v holding %.0f of %d keys: heap %.0f B per held key (%.1f MB): Tenure's own %.0f B, "+
		"and %.0f B the runner's goroutine (its descriptor and its wait for the context, as an idle goroutine costs); "+
		"runner stacks %.0f B per held key",
		since.Sub(start).Round(time.Second), held, n, heap, heap*held/1e6, heap-runner, runner, stack)
}

// writeHeapProfile writes a heap profile to path, if one is asked for. A
// profile is as of the last collection, so it collects first.
func writeHeapProfile(t *testing.T, path string) {
	if path == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Fatal(err)
	}
}
