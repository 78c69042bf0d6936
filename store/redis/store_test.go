package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

const unit = 200 * time.Millisecond

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, s *Store, key, owner string, ttl, grace time.Duration) int64 {
	t.Helper()
	res, err := s.Acquire(testCtx(t), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: grace, Running: true})
	if err != nil {
		t.Fatalf("acquire %q by %q: %v", key, owner, err)
	}
	if !res.Acquired {
		t.Fatalf("acquire %q by %q: blocked by %+v", key, owner, res.Holder)
	}
	return res.Epoch
}

func TestFirstEpochIsAtLeastTheServerClockInMicroseconds(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	now, err := s.client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	epoch := mustAcquire(t, s, "job", "a", unit, unit)
	if epoch < now.UnixMicro() {
		t.Fatalf("epoch %d is below server time %d µs", epoch, now.UnixMicro())
	}
	if epoch > now.UnixMicro()+int64(time.Minute/time.Microsecond) {
		t.Fatalf("epoch %d is far ahead of server time %d µs", epoch, now.UnixMicro())
	}
}

func TestPeerIsBlockedUntilExpiryPlusGrace(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	epoch := mustAcquire(t, s, "job", "a", unit, unit)

	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: unit, Grace: unit})
	if err != nil {
		t.Fatal(err)
	}
	h := res.Holder
	if res.Acquired || h.Owner != "a" || h.Epoch != epoch || !h.Live || !h.Running || h.Key != "job" {
		t.Fatalf("peer acquire while live = %+v, want blocked by a's live running term %d", res, epoch)
	}
	if h.TimeLeft <= 0 || h.TimeLeft > unit {
		t.Fatalf("holder time left %v, want in (0, %v]", h.TimeLeft, unit)
	}

	time.Sleep(unit + unit/4) // expired, still within grace
	res, err = s.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: unit, Grace: unit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || res.Holder.Live || res.Holder.TimeLeft > 0 {
		t.Fatalf("peer acquire within grace = %+v, want blocked by an expired term", res)
	}

	time.Sleep(unit) // past expiry + grace
	next := mustAcquire(t, s, "job", "b", unit, unit)
	if next <= epoch {
		t.Fatalf("takeover epoch %d not above %d", next, epoch)
	}
}

func TestReleasedKeyCanBeTakenAtOnce(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	epoch := mustAcquire(t, s, "job", "a", time.Minute, time.Minute)
	if err := s.Release(ctx, "a", []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	leases, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 1 || !leases[0].Released || leases[0].Live || leases[0].TimeLeft > 0 || leases[0].Running {
		t.Fatalf("after release List = %+v, want one released, not live record", leases)
	}
	if next := mustAcquire(t, s, "job", "b", time.Minute, time.Minute); next <= epoch {
		t.Fatalf("epoch after release %d not above %d", next, epoch)
	}
}

func TestReleaseOfAStaleTermChangesNothing(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	old := mustAcquire(t, s, "job", "a", time.Minute, 0)
	cur := mustAcquire(t, s, "job", "a", time.Minute, 0) // same owner: new term
	if err := s.Release(ctx, "a", []store.Term{{Key: "job", Epoch: old}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "b", []store.Term{{Key: "job", Epoch: cur}}); err != nil {
		t.Fatal(err)
	}
	leases, _ := s.List(ctx, "")
	if len(leases) != 1 || leases[0].Epoch != cur || !leases[0].Live || leases[0].Released {
		t.Fatalf("List = %+v, want term %d still live", leases, cur)
	}
}

func TestRenewAnswersPerItemInOrder(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	a := mustAcquire(t, s, "a", "me", unit, 0)
	b := mustAcquire(t, s, "b", "peer", unit, 0)
	c := mustAcquire(t, s, "c", "me", unit, 0)
	d := mustAcquire(t, s, "d", "me", unit, 0)
	if err := s.Release(ctx, "me", []store.Term{{Key: "d", Epoch: d}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Renew(ctx, "me", time.Minute, []store.RenewItem{
		{Key: "a", Epoch: a, Running: false}, // mine: renewed
		{Key: "b", Epoch: b},                 // a peer's
		{Key: "c", Epoch: c - 1},             // stale epoch
		{Key: "d", Epoch: d},                 // released
		{Key: "missing", Epoch: 1},           // never existed
		{Key: "c", Epoch: c},                 // mine
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, false, false, true}; !slices.Equal(got, want) {
		t.Fatalf("Renew = %v, want %v", got, want)
	}
	leases, _ := s.List(ctx, "a")
	if len(leases) != 1 || leases[0].Running || leases[0].TimeLeft < time.Minute-5*time.Second {
		t.Fatalf("renewed lease = %+v, want not running with about a minute left", leases)
	}
}

func TestOwnersMayHoldCommasAndSpaces(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	const owner = "host-1, pid 42,0,1,"
	epoch := mustAcquire(t, s, "job", owner, time.Minute, 0)
	got, err := s.Renew(ctx, owner, time.Minute, []store.RenewItem{{Key: "job", Epoch: epoch, Running: true}})
	if err != nil || !got[0] {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	leases, _ := s.List(ctx, "")
	if len(leases) != 1 || leases[0].Owner != owner || !leases[0].Running {
		t.Fatalf("List = %+v, want owner %q running", leases, owner)
	}
}

func TestRenewOfAnExpiredTermIsLost(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	epoch := mustAcquire(t, s, "job", "a", 20*time.Millisecond, time.Minute)
	time.Sleep(50 * time.Millisecond)
	got, err := s.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: epoch}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] {
		t.Fatal("renewal of an expired term succeeded")
	}
}

func TestLargeBatchesRenewAndReleaseEveryTerm(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	n := 2*maxBatch + 7 // three script calls in one pipeline
	items := make([]store.RenewItem, n)
	terms := make([]store.Term, n)
	for i := range n {
		key := fmt.Sprintf("k%05d", i)
		epoch := mustAcquire(t, s, key, "me", time.Minute, time.Minute)
		if i%3 == 0 {
			epoch++ // every third is stale
		}
		items[i] = store.RenewItem{Key: key, Epoch: epoch}
		terms[i] = store.Term{Key: key, Epoch: epoch}
	}
	// The pipeline path must survive a server that lost its script cache.
	if err := s.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Renew(ctx, "me", time.Minute, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range got {
		if ok != (i%3 != 0) {
			t.Fatalf("item %d renewed = %v, want %v", i, ok, i%3 != 0)
		}
	}
	if err := s.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "me", terms); err != nil {
		t.Fatal(err)
	}
	leases, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		if l.Released != (i%3 != 0) {
			t.Fatalf("lease %s released = %v, want %v", l.Key, l.Released, i%3 != 0)
		}
	}
}

func TestListIsByteExactPrefixSortedByKey(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	keys := []string{"job", "Job", "job ", "jobs/2", "jobs/10", "jo", "jöb", "k", "é"}
	for _, k := range keys {
		mustAcquire(t, s, k, "a", time.Minute, 0)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"Job", "jo", "job", "job ", "jobs/10", "jobs/2", "jöb", "k", "é"}},
		{"job", []string{"job", "job ", "jobs/10", "jobs/2"}},
		{"jobs/", []string{"jobs/10", "jobs/2"}},
		{"J", []string{"Job"}},
		{"j\xc3", []string{"jöb"}},
		{"\xc3", []string{"é"}},
		{"\xff", nil},
		{"z", nil},
	} {
		leases, err := s.List(ctx, tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range leases {
			got = append(got, l.Key)
			if l.Owner != "a" || !l.Live || l.TimeLeft <= 0 || l.TimeLeft > time.Minute {
				t.Errorf("lease %+v: want live, owned by a, under a minute left", l)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func TestListReadsEveryPageOfALargeNamespace(t *testing.T) {
	s := newTestStore(t)
	s.listPage = 3
	var want []string
	for _, i := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 10} {
		key := fmt.Sprintf("p/%02d", i)
		mustAcquire(t, s, key, "a", time.Minute, 0)
		want = append(want, key)
	}
	mustAcquire(t, s, "q", "a", time.Minute, 0)
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"p/", want},      // 3+3+3+1
		{"p/0", want[:9]}, // exactly three full pages
		{"", append(slices.Clone(want), "q")},
	} {
		leases, err := s.List(testCtx(t), tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range leases {
			got = append(got, l.Key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) in pages of 3 = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func TestRevokeFencesTheHolderAndBlocksPeersUntilExpiryPlusGrace(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	epoch := mustAcquire(t, s, "job", "a", 2*unit, unit)
	revoked, err := s.Revoke(ctx, "job")
	if err != nil || !revoked {
		t.Fatalf("Revoke = %v, %v; want true", revoked, err)
	}
	got, err := s.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: epoch}})
	if err != nil || got[0] {
		t.Fatalf("holder renewal after revoke = %v, %v; want refused", got, err)
	}
	leases, _ := s.List(ctx, "job")
	l := leases[0]
	if l.Owner != "" || l.Epoch <= epoch || l.Live || l.Released || l.TimeLeft <= unit {
		t.Fatalf("revoked record %+v: want unowned, newer epoch, not live, not released, the old expiry kept", l)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: unit, Grace: unit})
	if err != nil || res.Acquired || res.Holder.Live || res.Holder.Owner != "" {
		t.Fatalf("peer acquire right after revoke = %+v, %v; want blocked by the unowned term", res, err)
	}
	if again, _ := s.Revoke(ctx, "job"); again {
		t.Fatal("revoking an unowned term reported true")
	}
	time.Sleep(2*unit + unit/4) // expired, within grace
	if res, _ := s.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: unit, Grace: unit}); res.Acquired {
		t.Fatal("peer acquired a revoked key before its expiry + grace")
	}
	time.Sleep(unit)
	if next := mustAcquire(t, s, "job", "b", unit, unit); next <= l.Epoch {
		t.Fatalf("epoch after revoke %d not above %d", next, l.Epoch)
	}
	if revoked, _ := s.Revoke(ctx, "never-seen"); revoked {
		t.Fatal("revoking an unknown key reported true")
	}
}

func TestRevokeLeavesExpiredAndReleasedTermsAlone(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	mustAcquire(t, s, "expired", "a", 20*time.Millisecond, time.Minute)
	released := mustAcquire(t, s, "released", "a", time.Minute, time.Minute)
	if err := s.Release(ctx, "a", []store.Term{{Key: "released", Epoch: released}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	for _, key := range []string{"expired", "released"} {
		if revoked, err := s.Revoke(ctx, key); err != nil || revoked {
			t.Errorf("Revoke(%q) = %v, %v; want false: there is no live term", key, revoked, err)
		}
	}
	leases, _ := s.List(ctx, "")
	for _, l := range leases {
		if l.Owner != "a" {
			t.Errorf("%s changed owner to %q", l.Key, l.Owner)
		}
	}
}

func TestWatchDeliversAcquireAndReleaseForItsPrefix(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	events, err := s.Watch(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "other", "a", time.Minute, 0)
	epoch := mustAcquire(t, s, "jobs/1", "a", time.Minute, 0)
	if err := s.Release(ctx, "a", []store.Term{{Key: "jobs/1", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	want := []store.Event{
		{Kind: store.Acquired, Key: "jobs/1", Owner: "a", Epoch: epoch},
		{Kind: store.Released, Key: "jobs/1", Owner: "a", Epoch: epoch},
	}
	for _, w := range want {
		select {
		case ev, ok := <-events:
			if !ok || ev != w {
				t.Fatalf("event = %+v (open %v), want %+v", ev, ok, w)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event, want %+v", w)
		}
	}
}

func TestWatchChannelClosesWhenContextEndsOrStoreCloses(t *testing.T) {
	s := newTestStore(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	byCtx, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	byClose, err := s.Watch(testCtx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitClosed(t, byCtx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, byClose)
	if _, err := s.Watch(testCtx(t), ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
}

func waitClosed(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("watch channel still open")
		}
	}
}

func TestCallsAfterCloseFailWithErrClosed(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("List after Close = %v, want ErrClosed", err)
	}
}

func TestInvalidInputIsRejectedBeforeAnyCall(t *testing.T) {
	s := newTestStore(t)
	ctx := testCtx(t)
	if _, err := s.Acquire(ctx, store.AcquireRequest{Key: "a\tb", Owner: "o", TTL: time.Second}); !errors.Is(err, store.ErrInvalidKey) {
		t.Fatalf("key with a tab: %v, want ErrInvalidKey", err)
	}
	if _, err := s.Renew(ctx, "", time.Second, nil); !errors.Is(err, store.ErrInvalidOwner) {
		t.Fatalf("empty owner: %v, want ErrInvalidOwner", err)
	}
	if _, err := s.Renew(ctx, "o", 0, nil); !errors.Is(err, store.ErrInvalidDuration) {
		t.Fatalf("zero ttl: %v, want ErrInvalidDuration", err)
	}
	for _, ns := range []string{"a b", "{x}", "1abc", strings.Repeat("n", 64)} {
		if _, err := New(s.client, Options{Namespace: ns}); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("namespace %q: %v, want ErrInvalidName", ns, err)
		}
	}
}

func TestNamespacesAreIsolatedAndShareOneHashSlotEach(t *testing.T) {
	a := newTestStore(t)
	b := newTestStore(t)
	mustAcquire(t, a, "job", "x", time.Minute, 0)
	mustAcquire(t, b, "job", "y", time.Minute, 0)
	la, _ := a.List(testCtx(t), "")
	if len(la) != 1 || la[0].Owner != "x" {
		t.Fatalf("namespace a sees %+v", la)
	}
	for _, name := range append(slices.Clone(a.keys), a.channel) {
		if !strings.HasPrefix(name, "{"+a.namespace+"}:") {
			t.Errorf("%q lacks the hash tag {%s}", name, a.namespace)
		}
	}
}
