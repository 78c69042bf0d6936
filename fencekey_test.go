package tenure_test

import (
	"context"
	"sync"
	"testing"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// Two pools over one set of keys, and a singleton named like one of them,
// are three lease series, each counting its own epochs. Their runners all
// get Key "x"; fenced by it, the three shared one fence row, and the
// series ahead made the others' live holders stale. Each gets a FenceKey
// of its own: the singleton's is its Key, a pool key's its lease key.
func TestEveryLeaseSeriesHasAFenceKeyOfItsOwn(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var mu sync.Mutex
		leases := map[string]tenure.Lease{} // by series
		record := func(series string) tenure.Runner {
			return tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
				mu.Lock()
				leases[series] = l
				mu.Unlock()
				<-ctx.Done()
				return nil
			})
		}
		r := newReplica(t, st, "w")
		r.Set("x", tenure.Job{Runner: record("singleton")})
		for _, pool := range []string{"mail", "index"} {
			if err := r.AddPool(tenure.Pool{Name: pool, Source: tenure.StaticKeys("x"), Runner: record(pool)}); err != nil {
				t.Fatal(err)
			}
		}
		r.start()
		defer r.stop()
		advance(5 * renew)

		mu.Lock()
		defer mu.Unlock()
		if len(leases) != 3 {
			t.Fatalf("runs started: %v; want the singleton and both pools' x", leases)
		}
		fenceKeys := map[string]string{}
		for series, l := range leases {
			if l.Key != "x" {
				t.Errorf("%s's runner got Key %q, want x", series, l.Key)
			}
			if other, dup := fenceKeys[l.FenceKey]; dup || l.FenceKey == "" {
				t.Errorf("%s's FenceKey %q is empty or also %s's", series, l.FenceKey, other)
			}
			fenceKeys[l.FenceKey] = series
		}
		if got := leases["singleton"].FenceKey; got != "x" {
			t.Errorf("the singleton's FenceKey %q, want its Key", got)
		}
	})
}
