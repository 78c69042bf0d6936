package etcd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/etcd/
//
// Store.Renew of terms on the owner's session is a TimeToLive and a
// keep-alive, writing nothing; "store-read" is Store.Renew of terms it
// does not find on a session (acquired by another process of the same
// owner, or from before sessions): a read of every key and a write moving
// them onto the session. "naive" is one Store.Renew, and its round trips,
// per key, as the reference coordinator renews. The side-by-side run with
// etcd's concurrency package is in peer_bench_test.go.
var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return newTestStore(b) },
	Fill: fillHeld,
	// Terms outlive a sub-benchmark; sessions left behind by a crashed
	// run expire soon after.
	TTL: 2 * time.Minute,
	Renewals: map[string]storetest.Renewal{
		"store-read": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			return func(ctx context.Context) error {
				for _, it := range items {
					s.forget(owner, it.Key)
				}
				ok, err := s.Renew(ctx, owner, 2*time.Minute, items)
				if err == nil && (!ok[0] || !ok[len(ok)-1]) {
					err = fmt.Errorf("a term was not renewed")
				}
				return err
			}
		},
	},
}

// fillHeld acquires n keys for owner, sixteen at a time, onto its
// session.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	items := make([]store.RenewItem, n)
	if err := parallelDo(n, func(i int) error {
		key := fmt.Sprintf("bench/%06d", i+1)
		res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: owner, TTL: 2 * time.Minute, Grace: time.Second, Running: true})
		if err == nil && !res.Acquired {
			err = fmt.Errorf("refused: %+v", res.Holder)
		}
		items[i] = store.RenewItem{Key: key, Epoch: res.Epoch, Running: true}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return items
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }
