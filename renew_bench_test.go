package tenure_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// BenchmarkRenewalPathWith10000Keys times the whole renewal a replica
// holding 10,000 running keys makes each period — the batched store call
// and the engine's own work around it (the running flags, the outcomes,
// every run's deadline and watchdog) — against the store call alone
// (raw-renew) on the same terms. The in-memory store leaves the engine's
// part in view. Two timings: the default (renew every TTL/3) and frequent
// renewals (every TTL/15).
//
//	go test -run '^$' -bench RenewalPathWith10000Keys -benchtime 20x .
func BenchmarkRenewalPathWith10000Keys(b *testing.B) {
	for _, every := range []int{3, 15} {
		b.Run(fmt.Sprintf("renew-every-ttl/%d", every), func(b *testing.B) {
			const n, ttl = 10000, 30 * time.Second
			st := memstore.New(memstore.Options{})
			sup, err := tenure.New(tenure.Config{Store: st, Leases: tenure.LeasesOn, Owner: "A",
				TTL: ttl, Grace: 5 * time.Second, RenewEvery: ttl / time.Duration(every), Logger: testLogger()})
			if err != nil {
				b.Fatal(err)
			}
			ctx, stop := runKeys(b, sup, n, func(ctx context.Context, _ tenure.Lease) error {
				<-ctx.Done()
				return nil
			})
			defer stop()
			leases, err := st.List(ctx, "")
			if err != nil {
				b.Fatal(err)
			}
			items := make([]store.RenewItem, 0, n)
			for _, l := range leases {
				items = append(items, store.RenewItem{Key: l.Key, Epoch: l.Epoch, Running: true})
			}
			var engine, raw time.Duration
			for b.Loop() {
				t0 := time.Now()
				if !tenure.RenewOnce(sup, ctx) {
					b.Fatal("renewal not confirmed")
				}
				engine += time.Since(t0)
				t0 = time.Now()
				if _, err := st.Renew(ctx, sup.Owner(), ttl, items); err != nil {
					b.Fatal(err)
				}
				raw += time.Since(t0)
			}
			b.ReportMetric(float64(engine.Microseconds())/1000/float64(b.N), "renew-ms")
			b.ReportMetric(float64(raw.Microseconds())/1000/float64(b.N), "raw-renew-ms")
		})
	}
}

// runKeys sets n keys on sup, each run by runner, runs sup until stop is
// called, and returns once every runner has started.
func runKeys(b *testing.B, sup *tenure.Supervisor, n int, runner tenure.RunnerFunc) (ctx context.Context, stop func()) {
	var started atomic.Int64
	counted := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		started.Add(1)
		return runner(ctx, l)
	})
	for i := range n {
		if err := sup.Set(fmt.Sprintf("account-%05d", i), tenure.Job{Runner: counted}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	stop = func() { cancel(); <-done }
	for deadline := time.Now().Add(time.Minute); started.Load() < int64(n); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("%d of %d runners started", started.Load(), n)
		}
	}
	return ctx, stop
}
