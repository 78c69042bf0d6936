package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/etcd/

const (
	benchOwner = "bench-owner"
	// benchTTL keeps terms alive through a sub-benchmark; leases left
	// behind by a crashed run expire soon after.
	benchTTL = 2 * time.Minute
)

// fill acquires n keys for benchOwner, sixteen at a time (setup only), and
// returns them as renewal items. Each key is on leases of its own.
func fill(b *testing.B, s *Store, n int) []store.RenewItem {
	b.Helper()
	items := make([]store.RenewItem, n)
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(parallel)
	for i := range items {
		g.Go(func() error {
			key := fmt.Sprintf("pool/account-%06d", i)
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: benchOwner, TTL: benchTTL, Grace: time.Second, Running: true})
			if err != nil || !res.Acquired {
				return fmt.Errorf("setup acquire %s: %+v %w", key, res, err)
			}
			items[i] = store.RenewItem{Key: key, Epoch: res.Epoch, Running: true}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	// Renewals move the keys onto shared leases; the per-key ones would
	// linger until they expire.
	views, err := s.readKeys(context.Background(), keysOf(items))
	if err != nil {
		b.Fatal(err)
	}
	var ids []clientv3.LeaseID
	for _, v := range views {
		ids = append(ids, clientv3.LeaseID(v.live.Lease), clientv3.LeaseID(v.grace.Lease))
	}
	b.Cleanup(func() { revokeAll(context.Background(), testClient(b), ids) })
	return items
}

// BenchmarkRenew compares one renewal round of every lease a worker holds:
//
//   - store: Store.Renew once the batch shares its leases — a read of every
//     key, then one keep-alive per lease; nothing is written;
//   - store-rebind: Store.Renew when the batch changed — the read, two
//     grants and a write per key moving it onto the new leases;
//   - naive: one Store.Renew, and round trips, per key, as the reference
//     coordinator renews;
//   - per-key-leases: the etcd idiom without shared leases — a keep-alive
//     of each key's own live and grace leases, sixteen in flight, no read.
func BenchmarkRenew(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := newTestStore(b)
			items := fill(b, s, n)
			ctx := context.Background()
			renewAll := func(b *testing.B) {
				ok, err := s.Renew(ctx, benchOwner, benchTTL, items)
				if err != nil || len(ok) != n || !ok[0] || !ok[n-1] {
					b.Fatalf("renew: %v", err)
				}
			}
			perKey := func(b *testing.B) {
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/key")
			}

			b.Run("per-key-leases", func(b *testing.B) {
				views, err := s.readKeys(ctx, keysOf(items))
				if err != nil {
					b.Fatal(err)
				}
				var ids []clientv3.LeaseID
				for _, v := range views {
					ids = append(ids, clientv3.LeaseID(v.live.Lease), clientv3.LeaseID(v.grace.Lease))
				}
				b.ResetTimer()
				for b.Loop() {
					g, gctx := errgroup.WithContext(ctx)
					g.SetLimit(parallel)
					for _, id := range ids {
						g.Go(func() error {
							_, err := s.client.KeepAliveOnce(gctx, id)
							return err
						})
					}
					if err := g.Wait(); err != nil {
						b.Fatal(err)
					}
				}
				perKey(b)
			})
			b.Run("store-rebind", func(b *testing.B) {
				for b.Loop() {
					s.dropBatch(benchOwner, nil)
					renewAll(b)
				}
				perKey(b)
			})
			b.Run("store", func(b *testing.B) {
				renewAll(b) // bind the batch to shared leases
				b.ResetTimer()
				for b.Loop() {
					renewAll(b)
				}
				perKey(b)
			})
			b.Run("naive", func(b *testing.B) {
				for b.Loop() {
					for _, it := range items {
						ok, err := s.Renew(ctx, benchOwner, benchTTL, []store.RenewItem{it})
						if err != nil || !ok[0] {
							b.Fatalf("renew %s: %v", it.Key, err)
						}
					}
				}
				perKey(b)
			})
		})
	}
}

func keysOf(items []store.RenewItem) []string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}

func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	b.Run("free", func(b *testing.B) {
		s := newTestStore(b)
		i := 0
		for b.Loop() {
			i++
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: fmt.Sprintf("free/%d", i), Owner: "a", TTL: benchTTL})
			if err != nil || !res.Acquired {
				b.Fatalf("Acquire = %+v, %v", res, err)
			}
		}
	})
	b.Run("held-by-peer", func(b *testing.B) {
		s := newTestStore(b)
		if _, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Owner: "a", TTL: benchTTL}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Owner: "b", TTL: time.Minute})
			if err != nil || res.Acquired {
				b.Fatalf("Acquire = %+v, %v", res, err)
			}
		}
	})
}

// BenchmarkList10000 reads a namespace of 10,000 leases, as the engine does
// every round to learn who leads each key: once renewed together, they
// share their leases and List asks for one time-to-live.
func BenchmarkList10000(b *testing.B) {
	ctx := context.Background()
	s := newTestStore(b)
	items := fill(b, s, 10000)
	if _, err := s.Renew(ctx, benchOwner, benchTTL, items); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		ls, err := s.List(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) != 10000 || !ls[0].Live {
			b.Fatalf("listed %d leases", len(ls))
		}
	}
}
