package tenure_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store/memstore"
)

// BenchmarkDeadlineStopsOf10000Keys cuts a replica holding 10,000 running
// keys off its store, so that every run comes due at one moment, and
// reports how late each runner's context was cancelled after the StopAt
// it was last given: the fail-closed promise at scale, where one
// goroutine cancels the runs due together, one after another.
//
//	go test -run '^$' -bench DeadlineStopsOf10000Keys -benchtime 1x -count 3 .
func BenchmarkDeadlineStopsOf10000Keys(b *testing.B) {
	const n, ttl = 10_000, 3 * time.Second
	for b.Loop() {
		cut := &testenv.Partition{Store: memstore.New(memstore.Options{})}
		sup, err := tenure.New(tenure.Config{Store: cut, Leases: tenure.LeasesOn, Owner: "A",
			TTL: ttl, Grace: time.Second, Logger: testLogger()})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var late []time.Duration
		_, stop := runKeys(b, sup, n, func(ctx context.Context, l tenure.Lease) error {
			<-ctx.Done()
			stopped := time.Now()
			at, _, _ := l.StopAt()
			mu.Lock()
			late = append(late, stopped.Sub(at))
			mu.Unlock()
			return nil
		})
		time.Sleep(2 * time.Second) // a renewal or two: every run renewed in one batch
		cut.Cut.Store(true)
		for deadline := time.Now().Add(2 * ttl); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			got := len(late)
			mu.Unlock()
			if got == n {
				break
			}
			if time.Now().After(deadline) {
				stop()
				b.Fatalf("%d of %d runners stopped within two TTLs of the cut", got, n)
			}
		}
		stop()
		slices.Sort(late)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(late[0]), "late-min-ms")
		b.ReportMetric(ms(late[n/2]), "late-p50-ms")
		b.ReportMetric(ms(late[n*99/100]), "late-p99-ms")
		b.ReportMetric(ms(late[n-1]), "late-max-ms")
	}
}
