package postgres

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

const (
	ttl   = 2 * time.Second
	grace = 400 * time.Millisecond
)

func TestEveryTermGetsAGreaterEpoch(t *testing.T) {
	s := newTestStore(t)
	e1 := mustAcquire(t, s, "job", "a", ttl, grace)
	// The owner of a live term may acquire again; that is a new term.
	e2 := mustAcquire(t, s, "job", "a", ttl, grace)
	if err := s.Release(ctxT(t), "a", []store.Term{{Key: "job", Epoch: e2}}); err != nil {
		t.Fatal(err)
	}
	e3 := mustAcquire(t, s, "job", "b", ttl, grace)
	if !(e1 < e2 && e2 < e3) {
		t.Fatalf("epochs %d, %d, %d are not strictly increasing", e1, e2, e3)
	}
}

func TestLiveTermRefusesPeerAndReportsHolder(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", ttl, grace)
	res, err := s.Acquire(ctxT(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	h := res.Holder
	if res.Acquired || h.Owner != "a" || h.Epoch != epoch || !h.Live || h.Released || !h.Running || h.Key != "job" {
		t.Fatalf("Acquire by peer = %+v, want refused with a's live running term %d", res, epoch)
	}
	if h.TimeLeft <= ttl/2 || h.TimeLeft > ttl {
		t.Fatalf("holder time left %v, want close to %v", h.TimeLeft, ttl)
	}
}

func TestExpiredTermBlocksPeersUntilGraceHasPassed(t *testing.T) {
	s := newTestStore(t)
	short, g := 200*time.Millisecond, 600*time.Millisecond
	mustAcquire(t, s, "job", "a", short, g)
	time.Sleep(short + 100*time.Millisecond)
	res, err := s.Acquire(ctxT(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: g})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || res.Holder.Live || res.Holder.TimeLeft > 0 {
		t.Fatalf("Acquire within grace = %+v, want refused by an expired term", res)
	}
	time.Sleep(g)
	mustAcquire(t, s, "job", "b", ttl, g)
}

func TestReleasedKeyCanBeTakenAtOnce(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", ttl, time.Hour)
	if err := s.Release(ctxT(t), "a", []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	l := leaseOf(t, s, "job")
	if !l.Released || l.Live || l.Running || l.TimeLeft > 0 {
		t.Fatalf("after release: %+v", l)
	}
	mustAcquire(t, s, "job", "b", ttl, time.Hour)
}

func TestReleasingAnOldTermChangesNothing(t *testing.T) {
	s := newTestStore(t)
	old := mustAcquire(t, s, "job", "a", ttl, grace)
	cur := mustAcquire(t, s, "job", "a", ttl, grace)
	if err := s.Release(ctxT(t), "a", []store.Term{{Key: "job", Epoch: old}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctxT(t), "b", []store.Term{{Key: "job", Epoch: cur}}); err != nil {
		t.Fatal(err)
	}
	if l := leaseOf(t, s, "job"); !l.Live || l.Epoch != cur || l.Owner != "a" {
		t.Fatalf("stale releases changed the lease: %+v", l)
	}
}

func TestRenewAnswersEachItemInInputOrder(t *testing.T) {
	s := newTestStore(t)
	short := 300 * time.Millisecond
	alive := mustAcquire(t, s, "alive", "a", ttl, grace)
	expired := mustAcquire(t, s, "expired", "a", short, grace)
	released := mustAcquire(t, s, "released", "a", ttl, grace)
	taken := mustAcquire(t, s, "taken", "a", ttl, grace)
	if err := s.Release(ctxT(t), "a", []store.Term{{Key: "released", Epoch: released}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Revoke(ctxT(t), "taken"); err != nil || !ok {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	time.Sleep(short + 100*time.Millisecond)

	items := []store.RenewItem{
		{Key: "missing", Epoch: 1},
		{Key: "alive", Epoch: alive, Running: false},
		{Key: "expired", Epoch: expired},
		{Key: "alive", Epoch: alive + 1}, // a newer epoch than the store's
		{Key: "released", Epoch: released},
		{Key: "taken", Epoch: taken},
		{Key: "alive", Epoch: alive}, // the same term twice
	}
	got, err := s.Renew(ctxT(t), "a", ttl, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{false, true, false, false, false, false, true}
	if !slices.Equal(got, want) {
		t.Fatalf("Renew = %v, want %v", got, want)
	}
	if got, _ := s.Renew(ctxT(t), "b", ttl, items[1:2]); got[0] {
		t.Fatal("another owner renewed a's term")
	}
	if l := leaseOf(t, s, "alive"); l.Running {
		t.Fatalf("renewal did not record the runner state: %+v", l)
	}
}

func TestRenewalStampsExpiryFromTheServerClockNow(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", 500*time.Millisecond, grace)
	time.Sleep(300 * time.Millisecond)
	if got, err := s.Renew(ctxT(t), "a", ttl, []store.RenewItem{{Key: "job", Epoch: epoch}}); err != nil || !got[0] {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	if l := leaseOf(t, s, "job"); l.TimeLeft < ttl-300*time.Millisecond || l.TimeLeft > ttl {
		t.Fatalf("time left after renewal %v, want close to %v", l.TimeLeft, ttl)
	}
}

func TestRenewalBlockedBehindARowLockStampsExpiryAfterTheWait(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", ttl, grace)
	const wait = 800 * time.Millisecond
	unlock := lockKey(t, s, "job")
	time.AfterFunc(wait, unlock)
	start := time.Now()
	got, err := s.Renew(ctxT(t), "a", ttl, []store.RenewItem{{Key: "job", Epoch: epoch}})
	if err != nil || !got[0] {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	if time.Since(start) < wait {
		t.Fatal("the renewal did not wait for the lock; the test proves nothing")
	}
	// Stamped before the wait, time left would be about ttl-wait.
	if l := leaseOf(t, s, "job"); l.TimeLeft < ttl-wait/2 {
		t.Fatalf("time left %v after a renewal that waited %v: expiry was stamped before the wait", l.TimeLeft, wait)
	}
}

func TestRenewalThatWaitsPastTheExpiryIsRefused(t *testing.T) {
	s := newTestStore(t)
	short := 300 * time.Millisecond
	epoch := mustAcquire(t, s, "job", "a", short, grace)
	unlock := lockKey(t, s, "job")
	time.AfterFunc(2*short, unlock)
	got, err := s.Renew(ctxT(t), "a", ttl, []store.RenewItem{{Key: "job", Epoch: epoch}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] {
		t.Fatal("a term that expired while its renewal waited for a lock was renewed")
	}
}

func TestListMatchesPrefixesByteForByteInKeyOrder(t *testing.T) {
	s := newTestStore(t)
	keys := []string{"job", "Job", "job ", "jo%b", "jo_b", "jobs/1", "é/x", "a\\b"}
	for _, k := range keys {
		mustAcquire(t, s, k, "a", ttl, grace)
	}
	names := func(ls []store.Lease) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Key)
		}
		return out
	}
	all := slices.Clone(keys)
	slices.Sort(all) // Go orders strings by bytes, as the "C" collation does
	cases := map[string][]string{
		"":              all,
		"job":           {"job", "job ", "jobs/1"},
		"jo_":           {"jo_b"},
		"jo%":           {"jo%b"},
		"J":             {"Job"},
		"é":             {"é/x"},
		"a\\":           {"a\\b"},
		"nope":          nil,
		"\xc3":          {"é/x"}, // half of "é": still a byte prefix
		"\xc3\xa9/\xff": nil,
		"jo\x00":        nil,
	}
	for prefix, want := range cases {
		if got := names(mustList(t, s, prefix)); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestRevokeFencesTheHolderAndBlocksPeersUntilExpiryPlusGrace(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", ttl, grace)
	ok, err := s.Revoke(ctxT(t), "job")
	if err != nil || !ok {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if got, _ := s.Renew(ctxT(t), "a", ttl, []store.RenewItem{{Key: "job", Epoch: epoch}}); got[0] {
		t.Fatal("the revoked holder renewed its term")
	}
	l := leaseOf(t, s, "job")
	if l.Owner != "" || l.Epoch <= epoch || l.Live || l.Released {
		t.Fatalf("after revoke: %+v", l)
	}
	if res, _ := s.Acquire(ctxT(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace}); res.Acquired {
		t.Fatal("a peer acquired a revoked key before its expiry + grace")
	}
	time.Sleep(ttl + grace + 50*time.Millisecond)
	if e := mustAcquire(t, s, "job", "b", ttl, grace); e <= l.Epoch {
		t.Fatalf("epoch after revoke %d, want > %d", e, l.Epoch)
	}
	if ok, err := s.Revoke(ctxT(t), "missing"); err != nil || ok {
		t.Fatalf("Revoke of a key without record = %v, %v", ok, err)
	}
}

func TestConcurrentFirstCallsCreateTheTableOnce(t *testing.T) {
	table := randomTable()
	stores := []*Store{openTable(t, table, true)}
	for range 3 {
		stores = append(stores, openTable(t, table, false))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(stores))
	for i, s := range stores {
		for j := range 4 {
			wg.Go(func() {
				_, err := s.Acquire(ctxT(t), store.AcquireRequest{Key: fmt.Sprintf("k%d-%d", i, j), Owner: "a", TTL: ttl})
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(mustList(t, stores[0], "")); n != 16 {
		t.Fatalf("%d leases, want 16", n)
	}
}

func TestWithoutAutoMigrateTheTableComesFromMigrate(t *testing.T) {
	base := newTestStore(t) // owns the table name and drops it
	s, err := New(base.pool, Options{Table: base.table, NoAutoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.List(ctxT(t), ""); err == nil {
		t.Fatal("List worked without a table")
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	mustAcquire(t, s, "job", "a", ttl, grace)
}

func TestInvalidArgumentsAreRejectedBeforeTheServer(t *testing.T) {
	s := newTestStore(t)
	ctx := ctxT(t)
	long := string(make([]byte, store.MaxKeyBytes+1))
	for _, k := range []string{"", "a\x00b", "a\nb", long} {
		if _, err := s.Acquire(ctx, store.AcquireRequest{Key: k, Owner: "a", TTL: ttl}); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Acquire key %q: %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "", TTL: ttl}); !errors.Is(err, store.ErrInvalidOwner) {
		t.Errorf("empty owner: %v", err)
	}
	if _, err := s.Renew(ctx, "a", 0, []store.RenewItem{{Key: "k", Epoch: 1}}); !errors.Is(err, store.ErrInvalidDuration) {
		t.Errorf("zero ttl: %v", err)
	}
	if err := s.Release(ctx, "a", []store.Term{{Key: "bad\x01", Epoch: 1}}); !errors.Is(err, store.ErrInvalidKey) {
		t.Errorf("Release bad key: %v", err)
	}
}

func TestClosedStoreRefusesCalls(t *testing.T) {
	s := openTable(t, randomTable(), false)
	mustAcquire(t, s, "job", "a", ttl, grace)
	dropTable(t, s)
	s.Close()
	if _, err := s.List(ctxT(t), ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("List after Close: %v", err)
	}
	if _, err := s.Watch(ctxT(t), ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
}
