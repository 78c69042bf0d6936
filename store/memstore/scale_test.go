package memstore_test

import (
	"fmt"
	"testing"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// fill acquires n keys for owner and returns their terms as renew items.
func fill(tb testing.TB, s *memstore.Store, n int, owner string) []store.RenewItem {
	tb.Helper()
	items := make([]store.RenewItem, n)
	for i := range n {
		key := fmt.Sprintf("pool/%06d", i)
		res, err := s.Acquire(tb.Context(), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: grace})
		if err != nil || !res.Acquired {
			tb.Fatalf("Acquire(%q) = %+v, %v", key, res, err)
		}
		items[i] = store.RenewItem{Key: key, Epoch: res.Epoch, Running: true}
	}
	return items
}

func TestHundredThousandKeysRenewAndListInOneCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100,000 leases")
	}
	const n = 100_000
	s, _ := newStore()
	items := fill(t, s, n, "a")
	ok, err := s.Renew(t.Context(), "a", ttl, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, renewed := range ok {
		if !renewed {
			t.Fatalf("item %d (%q) not renewed", i, items[i].Key)
		}
	}
	ls, err := s.List(t.Context(), "pool/0999")
	if err != nil || len(ls) != 100 || ls[0].Key != "pool/099900" {
		t.Fatalf("List(pool/0999) = %d records starting %v, %v; want 100 from pool/099900", len(ls), ls[:min(1, len(ls))], err)
	}
}

func BenchmarkRenew10000(b *testing.B) {
	s, _ := newStore()
	items := fill(b, s, 10_000, "a")
	for b.Loop() {
		if _, err := s.Renew(b.Context(), "a", ttl, items); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkList100000(b *testing.B) {
	s, _ := newStore()
	fill(b, s, 100_000, "a")
	for b.Loop() {
		if _, err := s.List(b.Context(), ""); err != nil {
			b.Fatal(err)
		}
	}
}
