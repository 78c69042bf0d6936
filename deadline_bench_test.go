package tenure_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
		var started atomic.Int64
		var mu sync.Mutex
		var late []time.Duration
		runner := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			started.Add(1)
			<-ctx.Done()
			stopped := time.Now()
			at, _, _ := l.StopAt()
			mu.Lock()
			late = append(late, stopped.Sub(at))
			mu.Unlock()
			return nil
		})
		for i := range n {
			if err := sup.Set(fmt.Sprintf("account-%05d", i), tenure.Job{Runner: runner}); err != nil {
				b.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sup.Run(ctx) }()
		for deadline := time.Now().Add(time.Minute); started.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d runners started", started.Load(), n)
			}
		}
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
				b.Fatalf("%d of %d runners stopped within two TTLs of the cut", got, n)
			}
		}
		cancel()
		<-done
		slices.Sort(late)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(late[0]), "late-min-ms")
		b.ReportMetric(ms(late[n/2]), "late-p50-ms")
		b.ReportMetric(ms(late[n*99/100]), "late-p99-ms")
		b.ReportMetric(ms(late[n-1]), "late-max-ms")
	}
}
