package etcd

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// leaseOf returns the lease an etcd key of a lease key is on (0 when the
// etcd key is absent).
func leaseOf(t *testing.T, s *Store, etcdKey string) clientv3.LeaseID {
	t.Helper()
	resp, err := s.client.Get(testenv.Context(t), etcdKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

func grantedTTL(t *testing.T, s *Store, id clientv3.LeaseID) int64 {
	t.Helper()
	resp, err := s.client.TimeToLive(testenv.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GrantedTTL
}

// revision returns the newest revision at which a key of s's namespace was
// written: other tests write to the same etcd, so the store's own revision
// would not say whether this store wrote.
func revision(t *testing.T, s *Store) int64 {
	t.Helper()
	resp, err := s.client.Get(testenv.Context(t), s.root, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

// writesSince counts the transactions that wrote keys of s's namespace
// after revision rev.
func writesSince(t *testing.T, s *Store, rev int64) int {
	t.Helper()
	resp, err := s.client.Get(testenv.Context(t), s.root, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMinModRev(rev+1))
	if err != nil {
		t.Fatal(err)
	}
	revs := map[int64]bool{}
	for _, kv := range resp.Kvs {
		revs[kv.ModRevision] = true
	}
	return len(revs)
}

// Batches larger than a transaction are split, each checked against a
// server with that limit: a small MaxTxnOps makes the split happen with
// few keys and leaves a release's two nested levels no room to spare, the
// default one is the shared server's own.
func TestLargeBatchesRenewAndReleaseEveryTerm(t *testing.T) {
	for _, tc := range []struct {
		maxOps, n int
	}{{8, 23}, {DefaultMaxTxnOps, 2*(DefaultMaxTxnOps-maxNestedOps) + 7}} {
		t.Run(fmt.Sprintf("max-txn-ops=%d/keys=%d", tc.maxOps, tc.n), func(t *testing.T) {
			var s *Store
			if tc.maxOps == DefaultMaxTxnOps {
				s = newTestStoreWith(t, Options{})
			} else {
				srv := startEtcd(t, "--max-txn-ops", strconv.Itoa(tc.maxOps))
				var err error
				if s, err = New(clientOf(t, srv.url), Options{MaxTxnOps: tc.maxOps}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
			}
			ctx := testenv.Context(t)
			items := make([]store.RenewItem, tc.n)
			terms := make([]store.Term, tc.n)
			want := make([]bool, tc.n)
			for i := range tc.n {
				key := fmt.Sprintf("k%05d", i)
				epoch := testenv.MustAcquire(t, s, key, "me", time.Minute, time.Second)
				want[i] = i%3 != 0
				if !want[i] {
					epoch++ // every third is stale
				}
				items[i] = store.RenewItem{Key: key, Epoch: epoch}
				terms[i] = store.Term{Key: key, Epoch: epoch}
			}
			for round := range 2 {
				if got := testenv.Renew(t, s, "me", time.Minute, items...); !slices.Equal(got, want) {
					t.Fatalf("round %d: Renew = %v, want %v", round, got, want)
				}
			}
			if err := s.Release(ctx, "me", terms); err != nil {
				t.Fatal(err)
			}
			ls, err := s.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) != tc.n {
				t.Fatalf("List returned %d records, want %d", len(ls), tc.n)
			}
			for i, l := range ls {
				if l.Released != want[i] || l.Live == want[i] {
					t.Errorf("%s after the release: %+v, want released %t", l.Key, l, want[i])
				}
			}
		})
	}
}

// The grace that blocks peers is the one the term was acquired with.
func TestPeersWaitForTheGraceTheHolderAcquiredWith(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	testenv.MustAcquire(t, s, "job", "a", 2*time.Second, 2*time.Second)
	time.Sleep(3 * time.Second) // expired 1s ago, within a's grace
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatal("b, asking with no grace, took the key within the holder's grace")
	}
	if h := res.Holder; h.Live || h.TimeLeft > 0 || h.TimeLeft < -2*time.Second {
		t.Errorf("holder within grace: %+v, want not live with -1s or so left", h)
	}
}

func TestEpochsOutliveADeletedNamespace(t *testing.T) {
	s := newTestStore(t)
	e := testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Minute)
	if _, err := s.client.Delete(testenv.Context(t), s.root, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if next := testenv.MustAcquire(t, s, "job", "b", time.Minute, time.Minute); next <= e {
		t.Fatalf("epoch after the namespace was deleted: %d, want > %d", next, e)
	}
}

func TestNamespacesAreSeparate(t *testing.T) {
	s1 := newTestStore(t)
	s2 := newTestStore(t)
	testenv.MustAcquire(t, s1, "job", "a", time.Minute, 0)
	testenv.MustAcquire(t, s2, "job", "b", time.Minute, 0)
	if ls, _ := s2.List(testenv.Context(t), ""); len(ls) != 1 || ls[0].Owner != "b" {
		t.Fatalf("List in the second namespace = %+v", ls)
	}
}

func TestCloseLeavesAGivenClientOpen(t *testing.T) {
	c := testClient(t)
	prefix := randomPrefix()
	t.Cleanup(func() { dropNamespace(t, prefix) })
	s, err := New(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	testenv.MustAcquire(t, s, "job", "a", time.Minute, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(testenv.Context(t), "/"); err != nil {
		t.Fatalf("the client no longer works after the store was closed: %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) worked")
	}
}

func TestBadOptionsAreRejected(t *testing.T) {
	c := testClient(t)
	testenv.CheckBadNamesAreRefused(t, func(name string) error {
		_, err := New(c, Options{Prefix: name})
		return err
	})
	if _, err := New(c, Options{MaxTxnOps: 3}); err == nil {
		t.Error("MaxTxnOps 3 was accepted")
	}
}

// Expired terms report how long ago their expiry was, from the grace
// lease, until the grace is over.
func TestTimeLeftGoesNegativeAfterExpiry(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	testenv.MustAcquire(t, s, "job", "a", 2*time.Second, 3*time.Second)
	time.Sleep(3 * time.Second)
	l := testenv.LeaseOf(t, s, "job")
	if l.Live || l.TimeLeft > -250*time.Millisecond || l.TimeLeft < -1750*time.Millisecond {
		t.Errorf("1s after expiry: %+v, want not live with about -1s left", l)
	}
	time.Sleep(3 * time.Second)
	if l := testenv.LeaseOf(t, s, "job"); l.TimeLeft != -3*time.Second {
		t.Errorf("past the grace: TimeLeft %v, want -3s (at least the grace ago)", l.TimeLeft)
	}
}

// Renewals and releases of one owner may overlap (a key handed over while
// the round's renewal runs); the store's memory of its sessions must
// stay consistent, and the race detector quiet.
func TestOverlappingRenewalsAndReleasesOfOneOwner(t *testing.T) {
	s := newTestStore(t)
	const ttl = 10 * time.Second
	var items []store.RenewItem
	for i := range 20 {
		key := fmt.Sprintf("k%02d", i)
		items = append(items, store.RenewItem{Key: key, Epoch: testenv.MustAcquire(t, s, key, "a", ttl, time.Second)})
	}
	testenv.Renew(t, s, "a", ttl, items...)
	done := make(chan error, 1)
	go func() {
		for _, it := range items[:10] {
			if err := s.Release(testenv.Context(t), "a", []store.Term{{Key: it.Key, Epoch: it.Epoch}}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 5 {
		if _, err := s.Renew(testenv.Context(t), "a", ttl, items); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ok := testenv.Renew(t, s, "a", ttl, items...)
	for i, it := range items {
		if ok[i] != (i >= 10) {
			t.Errorf("%s after the releases: renewed %t, want %t", it.Key, ok[i], i >= 10)
		}
	}
	before := revision(t, s)
	testenv.Renew(t, s, "a", ttl, items[10:]...)
	if n := writesSince(t, s, before); n != 0 {
		t.Errorf("a steady renewal after the overlap wrote %d times", n)
	}
}
