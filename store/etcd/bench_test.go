package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/etcd/
//
// Store.Renew, once the batch shares its leases, reads every key and sends
// one keep-alive per lease, writing nothing; "naive" is one Store.Renew,
// and its round trips, per key, as the reference coordinator renews.
var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return newTestStore(b) },
	Fill: fillHeld,
	// Terms outlive a sub-benchmark; leases left behind by a crashed run
	// expire soon after.
	TTL: 2 * time.Minute,
	Renewals: map[string]storetest.Renewal{
		// Store.Renew when the batch changed: the read, two grants and a
		// write per key moving it onto the new leases.
		"store-rebind": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			return func(ctx context.Context) error {
				s.dropBatch(owner, nil)
				ok, err := s.Renew(ctx, owner, 2*time.Minute, items)
				if err == nil && (!ok[0] || !ok[len(ok)-1]) {
					err = fmt.Errorf("a term was not renewed")
				}
				return err
			}
		},
		// The etcd idiom without shared leases: a keep-alive of each key's
		// own live and grace leases, sixteen in flight, no read.
		"per-key-leases": func(b *testing.B, st store.Store, _ string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			ids := leasesOf(b, s, items)
			return func(ctx context.Context) error {
				g, gctx := errgroup.WithContext(ctx)
				g.SetLimit(parallel)
				for _, id := range ids {
					g.Go(func() error {
						_, err := s.client.KeepAliveOnce(gctx, id)
						return err
					})
				}
				return g.Wait()
			}
		},
	},
}

// fillHeld acquires n keys for owner, sixteen at a time. Each key is on
// leases of its own.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	items := make([]store.RenewItem, n)
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(parallel)
	for i := range items {
		g.Go(func() error {
			key := fmt.Sprintf("bench/%06d", i+1)
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: owner, TTL: 2 * time.Minute, Grace: time.Second, Running: true})
			if err != nil || !res.Acquired {
				return fmt.Errorf("fill: acquire %s: %+v %w", key, res, err)
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
	ids := leasesOf(b, s, items)
	b.Cleanup(func() { revokeAll(context.Background(), testClient(b), ids) })
	return items
}

// leasesOf returns the live and grace leases the items' keys are on.
func leasesOf(b *testing.B, s *Store, items []store.RenewItem) []clientv3.LeaseID {
	b.Helper()
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	views, err := s.readKeys(context.Background(), keys)
	if err != nil {
		b.Fatal(err)
	}
	var ids []clientv3.LeaseID
	for _, v := range views {
		ids = append(ids, clientv3.LeaseID(v.live.Lease), clientv3.LeaseID(v.grace.Lease))
	}
	return ids
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }
