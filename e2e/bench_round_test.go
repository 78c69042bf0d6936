package e2e_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	tmetrics "github.com/tenure-dev/tenure/metrics"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// BenchmarkRoundWith10000Keys measures one supervision round of a replica
// holding 10,000 keys with trivial runners: the batched renewal, the
// acquisition pass (nothing due), the read of the whole lease table, and
// the per-key bookkeeping. Each iteration waits for one more round.
//
//	go test -run '^$' -bench 'RoundWith10000Keys' -benchtime 10x ./e2e/
//
// Reported:
//   - round: each round's duration as the engine reports it to its
//     Observer (what tenure_round_seconds records), taken from a wrapper
//     around metrics.Collector: nothing polls the metrics, which with
//     10,000 keys would compete with the engine for the CPU;
//   - renew, list: the engine's Renew and List calls within the rounds,
//     timed by a wrapper around its store;
//   - raw-renew, raw-list: the same calls made directly on the store right
//     after a round (the same 10,000 terms, same owner), the floor a round
//     cannot go under;
//   - claim-s: the time from Run to all 10,000 runners started, once.
//
// TTL 30s with renewals every 2s, so that ten rounds take 20s and the
// initial claim of 10,000 keys (one acquisition each) fits in the deadline
// window even on PostgreSQL.
func BenchmarkRoundWith10000Keys(b *testing.B) {
	const n = 10000
	// The in-memory store shows what the engine itself costs per round.
	memory := backend{"memstore", func(testing.TB) func(testing.TB) store.Store {
		st := memstore.New(memstore.Options{})
		return func(testing.TB) store.Store { return st }
	}}
	for _, be := range append(backends[:len(backends):len(backends)], memory) {
		b.Run(be.name, func(b *testing.B) {
			open := be.site(b)
			raw := open(b)
			metrics := tmetrics.New()
			reg := prometheus.NewRegistry()
			reg.MustRegister(metrics)
			var started atomic.Int64
			runner := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
				started.Add(1)
				<-ctx.Done()
				return nil
			})
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("pool/account-%05d", i)
			}
			timed := roundTimer{Observer: metrics, rounds: make(chan time.Duration, 64)}
			cfg := tenure.Config{TTL: 30 * time.Second, Grace: 5 * time.Second, RenewEvery: 2 * time.Second, Observer: timed}
			w := newReplica(b, "W", raw, cfg, runner, keys...)
			begun := time.Now()
			w.start()
			pollUntil(b, 2*time.Minute, 10*time.Millisecond, "every runner to start", func() bool { return started.Load() == n })
			claim := time.Since(begun)
			acquisitions := counter(b, reg, "tenure_acquisitions_total")

			// The terms as the store has them, for the direct calls.
			ctx := context.Background()
			leases, err := raw.List(ctx, "pool/")
			if err != nil {
				b.Fatal(err)
			}
			items := make([]store.RenewItem, 0, n)
			for _, l := range leases {
				if l.Owner == w.sup.Owner() && l.Live {
					items = append(items, store.RenewItem{Key: l.Key, Epoch: l.Epoch, Running: true})
				}
			}
			if len(items) != n {
				b.Fatalf("the store shows %d live terms of the replica, want %d", len(items), n)
			}

			// Wait for the round under way to end, then count from there.
			timed.next(b)
			w.st.Record(true)
			var rounds, rawRenew, rawList samples
			for b.Loop() {
				rounds = append(rounds, timed.next(b))

				t0 := time.Now()
				ok, err := raw.Renew(ctx, w.sup.Owner(), cfg.TTL, items)
				rawRenew = append(rawRenew, time.Since(t0))
				if err != nil || len(ok) != n || !ok[0] || !ok[n-1] {
					b.Fatalf("direct renewal: %d results, %v", len(ok), err)
				}
				t0 = time.Now()
				ls, err := raw.List(ctx, "")
				rawList = append(rawList, time.Since(t0))
				if err != nil || len(ls) < n {
					b.Fatalf("direct list: %d leases, %v", len(ls), err)
				}
			}
			var renews, lists samples
			for _, c := range w.st.Record(false) {
				switch {
				case c.op == "renew" && c.n == n:
					renews = append(renews, c.took)
				case c.op == "list" && c.n >= n:
					lists = append(lists, c.took)
				}
			}
			if started.Load() != n || counter(b, reg, "tenure_handovers_total") != 0 || counter(b, reg, "tenure_deadline_stops_total") != 0 {
				b.Errorf("runners: %d running; handovers %v, deadline stops %v", started.Load(),
					counter(b, reg, "tenure_handovers_total"), counter(b, reg, "tenure_deadline_stops_total"))
			}
			rounds.report(b, "round")
			renews.report(b, "renew")
			lists.report(b, "list")
			rawRenew.report(b, "raw-renew")
			rawList.report(b, "raw-list")
			b.ReportMetric(claim.Seconds(), "claim-s")
			b.Logf("claim of %d keys: %v, %v acquisitions", n, claim.Round(time.Millisecond), acquisitions)
		})
	}
}

// roundTimer passes every round's duration on to the benchmark as well.
type roundTimer struct {
	tenure.Observer
	rounds chan time.Duration
}

func (r roundTimer) Round(d time.Duration) {
	r.Observer.Round(d)
	select {
	case r.rounds <- d:
	default: // the benchmark is not waiting for this one
	}
}

// next waits for the next round to end and returns its duration, skipping
// any that ended before the call.
func (r roundTimer) next(b *testing.B) time.Duration {
	b.Helper()
	for len(r.rounds) > 0 {
		<-r.rounds
	}
	select {
	case d := <-r.rounds:
		return d
	case <-time.After(time.Minute):
		b.Fatal("no round ended within a minute")
		return 0
	}
}

func counter(b *testing.B, reg *prometheus.Registry, name string) float64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			total := 0.0
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			return total
		}
	}
	b.Fatalf("no metric %s", name)
	return 0
}
