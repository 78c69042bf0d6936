package mysql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	if ok, err := s.Revoke(ctxT(t), "job"); err != nil || !ok {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	e4 := leaseOf(t, s, "job").Epoch
	if !(e1 == 1 && e1 < e2 && e2 < e3 && e3 < e4) {
		t.Fatalf("epochs %d, %d, %d, %d are not strictly increasing from 1", e1, e2, e3, e4)
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
		{Key: "alive", Epoch: alive, Running: true},
		{Key: "expired", Epoch: expired},
		{Key: "alive", Epoch: alive + 1}, // a newer epoch than the store's
		{Key: "released", Epoch: released},
		{Key: "taken", Epoch: taken},
		{Key: "alive", Epoch: alive}, // the same term again: its state wins
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
		t.Fatalf("renewal did not record the last runner state given: %+v", l)
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

// The conformance suite checks the same for one key; this one locks one
// key of a batch, so the other rows are stamped before the wait and the
// locked one after it.
func TestRenewalBlockedBehindARowLockStampsExpiryAfterTheWait(t *testing.T) {
	s := newTestStore(t)
	var items []store.RenewItem
	for _, k := range []string{"a", "b", "c"} {
		items = append(items, store.RenewItem{Key: k, Epoch: mustAcquire(t, s, k, "o", ttl, grace)})
	}
	const wait = 800 * time.Millisecond
	unlock := lockKey(t, s, "b")
	time.AfterFunc(wait, unlock)
	start := time.Now()
	got, err := s.Renew(ctxT(t), "o", ttl, items)
	if err != nil || !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	if time.Since(start) < wait {
		t.Fatal("the renewal did not wait for the lock; the test proves nothing")
	}
	// Stamped before the wait, time left would be about ttl-wait.
	if l := leaseOf(t, s, "b"); l.TimeLeft < ttl-wait/2 {
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

func TestTakeoverThatWaitedForALockStampsExpiryAfterTheWait(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", ttl, grace)
	if err := s.Release(ctxT(t), "a", []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	unlock := lockKey(t, s, "job")
	const wait = 800 * time.Millisecond
	time.AfterFunc(wait, unlock)
	start := time.Now()
	taken := mustAcquire(t, s, "job", "b", ttl, grace)
	if time.Since(start) < wait {
		t.Fatal("the acquisition did not wait for the lock; the test proves nothing")
	}
	if l := leaseOf(t, s, "job"); l.Owner != "b" || l.Epoch != taken || l.TimeLeft < ttl-wait/2 {
		t.Fatalf("after a takeover that waited %v: %+v; want b's term with about %v left", wait, l, ttl)
	}
}

func TestBatchesLargerThanOneStatementAreSplit(t *testing.T) {
	s := newTestStore(t)
	saved := maxBatchBytes
	maxBatchBytes = 120 // a few items per statement
	t.Cleanup(func() { maxBatchBytes = saved })

	var items []store.RenewItem
	var want []bool
	for i := range 40 {
		key := fmt.Sprintf("k/%02d", i)
		epoch := mustAcquire(t, s, key, "a", ttl, grace)
		if i%7 == 3 {
			epoch++ // lost: not the store's epoch
		}
		items = append(items, store.RenewItem{Key: key, Epoch: epoch})
		want = append(want, i%7 != 3)
	}
	rand.Shuffle(len(items), func(i, j int) {
		items[i], items[j] = items[j], items[i]
		want[i], want[j] = want[j], want[i]
	})
	got, err := s.Renew(ctxT(t), "a", ttl, items)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Renew = %v, want %v", got, want)
	}
	terms := make([]store.Term, len(items))
	for i, it := range items {
		terms[i] = store.Term{Key: it.Key, Epoch: it.Epoch}
	}
	if err := s.Release(ctxT(t), "a", terms); err != nil {
		t.Fatal(err)
	}
	for i, l := range mustList(t, s, "k/") {
		if l.Released != (i%7 != 3) {
			t.Errorf("after release: %+v", l)
		}
	}
}

func TestListMatchesPrefixesByteForByteInKeyOrder(t *testing.T) {
	s := newTestStore(t)
	keys := []string{"job", "Job", "job ", "JOB", "jöb", "jo%b", "jo_b", "jobs/1", "é/x", "a\\b", "a'b", "😀"}
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
	slices.Sort(all) // Go orders strings by bytes, as VARBINARY does
	cases := map[string][]string{
		"":              all,
		"job":           {"job", "job ", "jobs/1"},
		"job ":          {"job "},
		"jo_":           {"jo_b"},
		"jo%":           {"jo%b"},
		"J":             {"JOB", "Job"},
		"jö":            {"jöb"},
		"é":             {"é/x"},
		"a\\":           {"a\\b"},
		"a'":            {"a'b"},
		"nope":          nil,
		"\xc3":          {"é/x"}, // half of "é": still a byte prefix
		"\xf0\x9f":      {"😀"},
		"\xc3\xa9/\xff": nil,
		"jo\x00":        nil,
		"\xff":          nil,
	}
	for prefix, want := range cases {
		if got := names(mustList(t, s, prefix)); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
	// Each of them is its own key, with its own term.
	for _, k := range keys {
		if res, err := s.Acquire(ctxT(t), store.AcquireRequest{Key: k, Owner: "b", TTL: ttl}); err != nil || res.Acquired || res.Holder.Key != k {
			t.Errorf("Acquire(%q) by a peer = %+v, %v; want refused by its own live term", k, res, err)
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
	if l.Owner != "" || l.Epoch != epoch+1 || l.Live || l.Released || l.TimeLeft <= 0 {
		t.Fatalf("after revoke: %+v, want epoch %d, no owner, not live, expiry kept", l, epoch+1)
	}
	if ok, err := s.Revoke(ctxT(t), "job"); err != nil || ok {
		t.Fatalf("second Revoke = %v, %v; want false: no live term", ok, err)
	}
	if res, _ := s.Acquire(ctxT(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace}); res.Acquired {
		t.Fatal("a peer acquired a revoked key before its expiry + grace")
	}
	time.Sleep(l.TimeLeft + grace + 50*time.Millisecond)
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

// Batches lock their rows in key order whatever order the caller gives, so
// concurrent batches over the same keys queue instead of deadlocking. The
// server counts deadlocks, including those the store retried.
func TestOverlappingBatchesNeverDeadlock(t *testing.T) {
	s := newTestStore(t)
	var keys []string
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k/%03d", i))
	}
	owners := []string{"a", "b", "c", "d"}
	epochs := make(map[string]int64)
	for _, k := range keys {
		epochs[k] = mustAcquire(t, s, k, "a", time.Minute, grace)
	}
	before := deadlocks(t, s)
	var wg sync.WaitGroup
	for w, owner := range owners {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 15 {
				order := slices.Clone(keys)
				r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				items := make([]store.RenewItem, len(order))
				for i, k := range order {
					items[i] = store.RenewItem{Key: k, Epoch: epochs[k]}
				}
				if _, err := s.Renew(ctxT(t), owner, time.Minute, items); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := deadlocks(t, s); n != before {
		t.Fatalf("the server counted %d deadlocks during the test", n-before)
	}
}

func deadlocks(t *testing.T, s *Store) int64 {
	t.Helper()
	var name string
	var n int64
	err := s.db.QueryRowContext(ctxT(t), "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n)
	if err != nil {
		t.Skipf("the server does not count deadlocks: %v", err)
	}
	return n
}

func TestWithoutAutoMigrateTheTableComesFromMigrate(t *testing.T) {
	base := newTestStore(t) // owns the table name and drops it
	s, err := New(base.db, Options{Table: base.table, NoAutoMigrate: true})
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

func TestClosedStoreRefusesCalls(t *testing.T) {
	s := openTable(t, randomTable(), false)
	mustAcquire(t, s, "job", "a", ttl, grace)
	dropTable(t, s.db, s.table)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctxT(t), ""); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("List after Close: %v", err)
	}
	if _, err := s.Acquire(ctxT(t), store.AcquireRequest{Key: "k", Owner: "a", TTL: ttl}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := s.Migrate(ctxT(t)); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Migrate after Close: %v", err)
	}
}

func TestCancelledCallsReportAnError(t *testing.T) {
	s := newTestStore(t)
	epoch := mustAcquire(t, s, "job", "a", ttl, grace)
	unlock := lockKey(t, s, "job")
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	got, err := s.Renew(ctx, "a", ttl, []store.RenewItem{{Key: "job", Epoch: epoch}})
	if err == nil || !strings.Contains(err.Error(), "renew") {
		t.Fatalf("Renew blocked past its deadline = %v, %v; want an error", got, err)
	}
}
