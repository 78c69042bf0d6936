package etcd

import (
	"fmt"
	"slices"
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

func TestSteadyRenewalsKeepSharedLeasesAliveWithoutWriting(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	var items []store.RenewItem
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		items = append(items, store.RenewItem{Key: key, Epoch: testenv.MustAcquire(t, s, key, "a", 4*time.Second, time.Second), Running: true})
	}
	// The first renewal binds the batch to one live and one grace lease.
	if ok := testenv.Renew(t, s, "a", 4*time.Second, items...); slices.Contains(ok, false) {
		t.Fatalf("first renewal = %v, want all renewed", ok)
	}
	live, grace := leaseOf(t, s, s.liveKey("k0")), leaseOf(t, s, s.graceKey("k0"))
	for _, it := range items {
		if l, g := leaseOf(t, s, s.liveKey(it.Key)), leaseOf(t, s, s.graceKey(it.Key)); l != live || g != grace {
			t.Fatalf("%s is on leases %x/%x, k0 on %x/%x: a batch shares one pair", it.Key, l, g, live, grace)
		}
	}
	if got := grantedTTL(t, s, grace) - grantedTTL(t, s, live); got != 1 {
		t.Errorf("grace lease outlives the live lease by %ds, want the grace of 1s", got)
	}

	// Later renewals of the same terms only keep the leases alive, past
	// the first term's end.
	before := revision(t, s)
	for range 3 {
		time.Sleep(1500 * time.Millisecond)
		if ok := testenv.Renew(t, s, "a", 4*time.Second, items...); slices.Contains(ok, false) {
			t.Fatalf("steady renewal = %v, want all renewed", ok)
		}
	}
	if n := writesSince(t, s, before); n != 0 {
		t.Errorf("steady renewals wrote %d times; they should write nothing", n)
	}
	if l := testenv.LeaseOf(t, s, "k4"); !l.Live || l.TimeLeft < 3*time.Second {
		t.Errorf("k4 after steady renewals: %+v, want live with about 4s left", l)
	}

	// A changed running flag is written, and the renewal still keeps the pair.
	items[2].Running = false
	if ok := testenv.Renew(t, s, "a", 4*time.Second, items...); slices.Contains(ok, false) {
		t.Fatalf("renewal with a new running flag = %v", ok)
	}
	if l := testenv.LeaseOf(t, s, "k2"); l.Running {
		t.Errorf("k2 running flag not recorded: %+v", l)
	}
	if got := leaseOf(t, s, s.liveKey("k2")); got != live {
		t.Errorf("k2 moved to lease %x; only its record needed writing", got)
	}
}

// A term the owner stops renewing must run out even while the rest of its
// batch is renewed: the batch then moves to fresh leases instead of
// keeping the old pair (and the dropped term) alive.
func TestATermLeftOutOfARenewalExpires(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	ea := testenv.MustAcquire(t, s, "keep", "a", 2*time.Second, time.Second)
	ed := testenv.MustAcquire(t, s, "drop", "a", 2*time.Second, time.Second)
	keep := store.RenewItem{Key: "keep", Epoch: ea}
	testenv.Renew(t, s, "a", 2*time.Second, keep, store.RenewItem{Key: "drop", Epoch: ed})
	for range 4 {
		time.Sleep(time.Second)
		if ok := testenv.Renew(t, s, "a", 2*time.Second, keep); !ok[0] {
			t.Fatal("renewal of keep was refused")
		}
	}
	if l := testenv.LeaseOf(t, s, "drop"); l.Live {
		t.Errorf("drop is still live 4s after its last renewal with a 2s ttl: %+v", l)
	}
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: "drop", Owner: "b", TTL: 2 * time.Second, Grace: time.Second})
	if err != nil || !res.Acquired {
		t.Errorf("b could not take drop 4s after it was last renewed (ttl 2s, grace 1s): %+v, %v", res, err)
	}
	if l := testenv.LeaseOf(t, s, "keep"); !l.Live || l.Owner != "a" {
		t.Errorf("keep: %+v, want a's live term", l)
	}
}

// A revoked term's grace key stays on its batch's grace lease; renewing
// the rest of the batch must not keep that lease — and the revoked key —
// blocked beyond the old expiry + grace.
func TestRenewingABatchDoesNotExtendARevokedTerm(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	e1 := testenv.MustAcquire(t, s, "k1", "a", 2*time.Second, time.Second)
	e2 := testenv.MustAcquire(t, s, "k2", "a", 2*time.Second, time.Second)
	items := []store.RenewItem{{Key: "k1", Epoch: e1}, {Key: "k2", Epoch: e2}}
	testenv.Renew(t, s, "a", 2*time.Second, items...)
	// Revoked by an operator's process, which the holder's store knows nothing of.
	op, err := New(s.client, Options{Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	revokedAt := time.Now()
	if ok, err := op.Revoke(testenv.Context(t), "k2"); err != nil || !ok {
		t.Fatalf("Revoke(k2) = %t, %v", ok, err)
	}
	if ok := testenv.Renew(t, s, "a", 2*time.Second, items...); !ok[0] || ok[1] {
		t.Fatalf("renewal after revoking k2 = %v, want [true false]", ok)
	}
	for time.Since(revokedAt) < 4*time.Second {
		time.Sleep(500 * time.Millisecond)
		if ok := testenv.Renew(t, s, "a", 2*time.Second, items[0]); !ok[0] {
			t.Fatal("renewal of k1 was refused")
		}
	}
	// k2's term ended at most 2s after the revocation; its grace 1s later.
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: "k2", Owner: "b", TTL: 2 * time.Second, Grace: time.Second})
	if err != nil || !res.Acquired {
		t.Errorf("b could not take revoked k2 %v after the revocation: %+v, %v", time.Since(revokedAt), res, err)
	}
}

// Batches larger than a transaction are split; a small MaxTxnOps makes the
// split happen with few keys, the default one is checked against the
// server's own limit.
func TestLargeBatchesRenewAndReleaseEveryTerm(t *testing.T) {
	for _, tc := range []struct {
		maxOps, n int
	}{{8, 23}, {DefaultMaxTxnOps, 2*(DefaultMaxTxnOps-maxNestedOps) + 7}} {
		t.Run(fmt.Sprintf("max-txn-ops=%d/keys=%d", tc.maxOps, tc.n), func(t *testing.T) {
			s := newTestStoreWith(t, Options{MaxTxnOps: tc.maxOps})
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

// Lease TTLs are whole seconds with a server floor: a term may end later
// than asked, never earlier, and its grace lease outlives its live lease
// by at least the grace.
func TestLeaseTTLsAreRoundedUpToWholeSecondsAndTheServerFloor(t *testing.T) {
	s := newTestStore(t)
	for _, tc := range []struct {
		ttl, grace       time.Duration
		minLive, minDiff int64
	}{
		{1500 * time.Millisecond, 300 * time.Millisecond, 2, 1},
		{time.Millisecond, 0, 1, 0},
		{3 * time.Second, 2 * time.Second, 3, 2},
	} {
		key := fmt.Sprintf("ttl-%v-%v", tc.ttl, tc.grace)
		testenv.MustAcquire(t, s, key, "a", tc.ttl, tc.grace)
		live := grantedTTL(t, s, leaseOf(t, s, s.liveKey(key)))
		grace := grantedTTL(t, s, leaseOf(t, s, s.graceKey(key)))
		if live < tc.minLive || grace-live < tc.minDiff {
			t.Errorf("ttl %v grace %v: leases of %ds and %ds, want ≥ %ds and %ds more", tc.ttl, tc.grace, live, grace, tc.minLive, tc.minDiff)
		}
	}
	if s.minTTL.Load() < 1 {
		t.Errorf("minTTL = %d", s.minTTL.Load())
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

// A keep-alive that finds the batch's live lease expired loses the batch
// and must not refresh its grace lease: that would hold peers off terms
// nobody holds. (Renew reaches this only in the half second an expired
// live key lingers, so the test calls keepAlive directly.)
func TestAKeepAliveTooLateLeavesTheGraceLeaseAlone(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	e := testenv.MustAcquire(t, s, "job", "a", 2*time.Second, 2*time.Second)
	item := store.RenewItem{Key: "job", Epoch: e}
	testenv.Renew(t, s, "a", 2*time.Second, item) // binds the term to a batch's leases
	grace := leaseOf(t, s, s.graceKey("job"))
	if len(s.batches["a"]) != 1 || s.batches["a"][0].leases.grace[2] != grace {
		t.Fatalf("batches after the first renewal: %+v, grace key on %x", s.batches["a"], grace)
	}
	b := s.batches["a"][0]
	time.Sleep(2600 * time.Millisecond)
	alive, err := s.keepAlive(testenv.Context(t), "a", b)
	if err != nil || alive {
		t.Fatalf("keep-alive after the live lease expired = %v, %v; want lost", alive, err)
	}
	resp, err := s.client.TimeToLive(testenv.Context(t), grace)
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL > 2 {
		t.Errorf("the grace lease has %ds left after a failed keep-alive; it was refreshed", resp.TTL)
	}
	if len(s.batches["a"]) != 0 {
		t.Error("the expired batch is still remembered")
	}
}

// Pools gain and lose keys all the time: a new term gets a pair of leases
// of its own, a released one simply leaves, and the terms already bound
// are never rewritten.
func TestChangesToABatchRewriteOnlyWhatChanged(t *testing.T) {
	s := newTestStore(t)
	const ttl = 10 * time.Second
	var items []store.RenewItem
	add := func(key string) {
		items = append(items, store.RenewItem{Key: key, Epoch: testenv.MustAcquire(t, s, key, "a", ttl, time.Second), Running: true})
	}
	for i := range 5 {
		add(fmt.Sprintf("k%d", i))
	}
	testenv.Renew(t, s, "a", ttl, items...)
	first := leaseOf(t, s, s.liveKey("k0"))

	add("new")
	before := revision(t, s)
	if ok := testenv.Renew(t, s, "a", ttl, items...); slices.Contains(ok, false) {
		t.Fatalf("renewal with a new key = %v", ok)
	}
	// The new key's live and grace keys, and nothing else.
	if writes := writesSince(t, s, before); writes != 1 {
		t.Errorf("renewal with one new key took %d writes, want 1 transaction", writes)
	}
	for _, it := range items[:5] {
		if got := leaseOf(t, s, s.liveKey(it.Key)); got != first {
			t.Errorf("%s moved from lease %x to %x", it.Key, first, got)
		}
	}
	if got := leaseOf(t, s, s.liveKey("new")); got == first {
		t.Error("the new key joined the old lease")
	}

	if err := s.Release(testenv.Context(t), "a", []store.Term{{Key: "k2", Epoch: items[2].Epoch}}); err != nil {
		t.Fatal(err)
	}
	items = slices.Delete(items, 2, 3)
	before = revision(t, s)
	for range 2 {
		if ok := testenv.Renew(t, s, "a", ttl, items...); slices.Contains(ok, false) {
			t.Fatalf("renewal after releasing k2 = %v", ok)
		}
	}
	if n := writesSince(t, s, before); n != 0 {
		t.Errorf("renewals after a release wrote %d times; the other terms' leases are intact", n)
	}
}

func TestAnOwnersTermsSpreadOverAFewLeasePairsAtMost(t *testing.T) {
	s := newTestStore(t)
	const ttl = 10 * time.Second
	var items []store.RenewItem
	for i := range maxBatches + 3 {
		key := fmt.Sprintf("k%d", i)
		items = append(items, store.RenewItem{Key: key, Epoch: testenv.MustAcquire(t, s, key, "a", ttl, time.Second)})
		if ok := testenv.Renew(t, s, "a", ttl, items...); slices.Contains(ok, false) {
			t.Fatalf("renewal %d = %v", i, ok)
		}
		s.batchMu.Lock()
		n := len(s.batches["a"])
		s.batchMu.Unlock()
		if n > maxBatches {
			t.Fatalf("after renewal %d the terms are on %d lease pairs, want ≤ %d", i, n, maxBatches)
		}
	}
	pairs := map[clientv3.LeaseID]bool{}
	for _, it := range items {
		pairs[leaseOf(t, s, s.liveKey(it.Key))] = true
	}
	if len(pairs) > maxBatches {
		t.Errorf("%d terms are on %d live leases, want ≤ %d", len(items), len(pairs), maxBatches)
	}
	before := revision(t, s)
	if ok := testenv.Renew(t, s, "a", ttl, items...); slices.Contains(ok, false) {
		t.Fatalf("final renewal = %v", ok)
	}
	if n := writesSince(t, s, before); n != 0 {
		t.Errorf("an unchanged renewal wrote %d times", n)
	}
}

// Renewals and releases of one owner may overlap (a key handed over while
// the round's renewal runs); the store's memory of its lease pairs must
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
