package etcd

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Tenure side by side with etcd's own concurrency package, the best peer
// on etcd, in one run. Run with:
//
//	go test -run '^$' -bench 'VersusConcurrency' -benchtime 3x ./store/etcd/
//
// On etcd 3.4 run each side on its own instead, on an etcd started afresh
// or idle for a minute: a side's cleanup deletes thousands of keys at
// once, and for about a minute after that the server answers reads and
// keep-alives several times slower, so the side that runs next loses
// (BENCHMARKS.md, "Measuring on etcd 3.4").
//
// claim: take 10,000 free keys, sixteen calls in flight (Store.Acquire;
// Mutex.TryLock on one session). keep-alive: one renewal period of a
// process holding 10,000 keys (Store.Renew of them all; the session's
// keep-alive). Both report calls/op, the calls and streams sent to etcd.
// handoff: a holder gives a key up and a waiting peer takes it, timed from
// the release to the peer holding it (Store.Release → the peer's Watch
// event → Store.Acquire; Election.Resign → the peer's Campaign returning),
// with p50 and p99 over the iterations.
func BenchmarkVersusConcurrency(b *testing.B) {
	const n = 10000
	// What the engine asks of a claim at a TTL of a minute (TTL -
	// 2·RenewEvery - CallTimeout, at the default RenewEvery of TTL/3 and
	// CallTimeout of RenewEvery/2): a term may be dated from the session's
	// last keep-alive, up to 10s back, instead of waiting for a new one.
	const maxElapsed = 10 * time.Second
	b.Run(fmt.Sprintf("claim-%d/tenure", n), func(b *testing.B) {
		s, calls := countingStore(b)
		round := 0
		measure(b, calls, func() error {
			round++
			return parallelDo(n, func(i int) error {
				key := fmt.Sprintf("claim%d/%06d", round, i)
				res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: "a", TTL: time.Minute, Grace: time.Second, MaxElapsed: maxElapsed})
				if err == nil && !res.Acquired {
					err = fmt.Errorf("%s refused", key)
				}
				return err
			})
		})
	})
	b.Run(fmt.Sprintf("claim-%d/etcd-mutex", n), func(b *testing.B) {
		s, calls := countingStore(b)
		sess := newSession(b, s)
		round := 0
		measure(b, calls, func() error {
			round++
			return parallelDo(n, func(i int) error {
				return concurrency.NewMutex(sess, fmt.Sprintf("%smutex%d/%06d", s.root, round, i)).TryLock(context.Background())
			})
		})
	})
	b.Run(fmt.Sprintf("keep-alive-%d/tenure", n), func(b *testing.B) {
		s, calls := countingStore(b)
		items := make([]store.RenewItem, n)
		if err := parallelDo(n, func(i int) error {
			key := fmt.Sprintf("k/%06d", i)
			res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: "a", TTL: time.Minute, Grace: time.Second, Running: true})
			items[i] = store.RenewItem{Key: key, Epoch: res.Epoch, Running: true}
			return err
		}); err != nil {
			b.Fatal(err)
		}
		measure(b, calls, func() error {
			ok, err := s.Renew(context.Background(), "a", time.Minute, items)
			if err == nil && slices.Contains(ok, false) {
				err = fmt.Errorf("a term was not renewed")
			}
			return err
		})
	})
	b.Run(fmt.Sprintf("keep-alive-%d/etcd-mutex", n), func(b *testing.B) {
		s, calls := countingStore(b)
		sess := newSession(b, s)
		if err := parallelDo(n, func(i int) error {
			return concurrency.NewMutex(sess, fmt.Sprintf("%smutex/%06d", s.root, i)).TryLock(context.Background())
		}); err != nil {
			b.Fatal(err)
		}
		measure(b, calls, func() error {
			_, err := s.client.KeepAliveOnce(context.Background(), sess.Lease())
			return err
		})
	})
	b.Run("handoff/tenure", func(b *testing.B) {
		s, _ := countingStore(b)
		peer, err := New(s.client, Options{Prefix: s.prefix})
		if err != nil {
			b.Fatal(err)
		}
		defer peer.Close()
		stores := [2]*Store{s, peer}
		owners := [2]string{"a", "b"}
		ctx := context.Background()
		req := func(i int) store.AcquireRequest {
			return store.AcquireRequest{Key: "job", Owner: owners[i], TTL: time.Minute, Grace: time.Second, MaxElapsed: maxElapsed}
		}
		res, err := s.Acquire(ctx, req(0))
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		epoch, holder := res.Epoch, 0
		var took []time.Duration
		for b.Loop() {
			waiter := 1 - holder
			wctx, cancel := context.WithCancel(ctx)
			events, err := stores[waiter].Watch(wctx, "job")
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := stores[holder].Release(ctx, owners[holder], []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
				b.Fatal(err)
			}
			for ev := range events {
				if ev.Kind == store.Released {
					break
				}
			}
			res, err := stores[waiter].Acquire(ctx, req(waiter))
			if err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			took = append(took, time.Since(start))
			cancel()
			epoch, holder = res.Epoch, waiter
		}
		storetest.ReportQuantiles(b, took)
	})
	b.Run("handoff/etcd-election", func(b *testing.B) {
		s, _ := countingStore(b)
		var elections [2]*concurrency.Election
		for i := range elections {
			elections[i] = concurrency.NewElection(newSession(b, s), s.root+"election")
		}
		ctx := context.Background()
		if err := elections[0].Campaign(ctx, "a"); err != nil {
			b.Fatal(err)
		}
		holder := 0
		var took []time.Duration
		for b.Loop() {
			waiter := 1 - holder
			won := make(chan error, 1)
			go func() { won <- elections[waiter].Campaign(ctx, "w") }()
			waitForCandidates(b, s, s.root+"election", 2)
			// Campaign watches from the revision it read, and the server
			// moves such a watcher into its synced set on a 100ms tick:
			// give it that, its best case, as Tenure's peer also had its
			// Watch before the release.
			b.StopTimer()
			time.Sleep(200 * time.Millisecond)
			b.StartTimer()
			start := time.Now()
			if err := elections[holder].Resign(ctx); err != nil {
				b.Fatal(err)
			}
			if err := <-won; err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
			holder = waiter
		}
		storetest.ReportQuantiles(b, took)
	})
}

// measure times round over the benchmark's iterations and reports the
// calls each sent to etcd.
func measure(b *testing.B, calls interface{ Load() int64 }, round func() error) {
	b.Helper()
	var sent int64
	for b.Loop() {
		from := calls.Load()
		if err := round(); err != nil {
			b.Fatal(err)
		}
		sent += calls.Load() - from
	}
	b.ReportMetric(float64(sent)/float64(b.N), "calls/op")
}

// parallelDo runs do(0…n-1), sixteen at a time.
func parallelDo(n int, do func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(parallel)
	for i := range n {
		g.Go(func() error { return do(i) })
	}
	return g.Wait()
}

// newSession opens an etcd concurrency session of one minute on s's
// client, closed (its lease revoked) when the benchmark ends.
func newSession(b *testing.B, s *Store) *concurrency.Session {
	b.Helper()
	sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(60))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sess.Close() })
	return sess
}

// waitForCandidates waits until n campaigners have their keys under pfx,
// so a resignation is heard by a peer already waiting.
func waitForCandidates(b *testing.B, s *Store, pfx string, n int64) {
	b.Helper()
	for {
		resp, err := s.client.Get(context.Background(), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
