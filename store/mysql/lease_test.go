package mysql

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

const (
	ttl   = 2 * time.Second
	grace = 400 * time.Millisecond
)

// The conformance suite checks the same for one key; this one locks one
// key of a batch, so the other rows are stamped before the wait and the
// locked one after it.
func TestRenewalBlockedBehindARowLockStampsExpiryAfterTheWait(t *testing.T) {
	s := tables.New(t)
	var items []store.RenewItem
	for _, k := range []string{"a", "b", "c"} {
		items = append(items, store.RenewItem{Key: k, Epoch: testenv.MustAcquire(t, s, k, "o", ttl, grace)})
	}
	const wait = 800 * time.Millisecond
	unlock := lockKey(t, s, "b")
	time.AfterFunc(wait, unlock)
	start := time.Now()
	got, err := s.Renew(testenv.Context(t), "o", ttl, items)
	if err != nil || !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("Renew = %v, %v", got, err)
	}
	if time.Since(start) < wait {
		t.Fatal("the renewal did not wait for the lock; the test proves nothing")
	}
	// Stamped before the wait, time left would be about ttl-wait.
	if l := testenv.LeaseOf(t, s, "b"); l.TimeLeft < ttl-wait/2 {
		t.Fatalf("time left %v after a renewal that waited %v: expiry was stamped before the wait", l.TimeLeft, wait)
	}
}

func TestBatchesLargerThanOneStatementAreSplit(t *testing.T) {
	s := tables.New(t)
	saved := maxBatchBytes
	maxBatchBytes = 120 // a few items per statement
	t.Cleanup(func() { maxBatchBytes = saved })

	var items []store.RenewItem
	var want []bool
	for i := range 40 {
		key := fmt.Sprintf("k/%02d", i)
		epoch := testenv.MustAcquire(t, s, key, "a", ttl, grace)
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
	got, err := s.Renew(testenv.Context(t), "a", ttl, items)
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
	if err := s.Release(testenv.Context(t), "a", terms); err != nil {
		t.Fatal(err)
	}
	for i, l := range testenv.List(t, s, "k/") {
		if l.Released != (i%7 != 3) {
			t.Errorf("after release: %+v", l)
		}
	}
}

// Batches lock their rows in key order whatever order the caller gives, so
// concurrent batches over the same keys queue instead of deadlocking. The
// server counts deadlocks, including those the store retried.
func TestOverlappingBatchesNeverDeadlock(t *testing.T) {
	s := tables.New(t)
	var keys []string
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("k/%03d", i))
	}
	owners := []string{"a", "b", "c", "d"}
	epochs := make(map[string]int64)
	for _, k := range keys {
		epochs[k] = testenv.MustAcquire(t, s, k, "a", time.Minute, grace)
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
				if _, err := s.Renew(testenv.Context(t), owner, time.Minute, items); err != nil {
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
	err := s.db.QueryRowContext(testenv.Context(t), "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n)
	if err != nil {
		t.Skipf("the server does not count deadlocks: %v", err)
	}
	return n
}

func TestTheLastRunningStateOfARepeatedTermIsRecorded(t *testing.T) {
	testenv.CheckTheLastRunningStateOfARepeatedTermWins(t, tables.New(t))
}

func TestConcurrentFirstCallsCreateTheTableOnce(t *testing.T) {
	tables.CheckFirstCallsRaceToCreateOneTable(t)
}

func TestWithoutAutoMigrateTheTableComesFromMigrate(t *testing.T) {
	tables.CheckMigrateCreatesTheTable(t)
}

func TestReadOnlyNeverCreatesTheTableAndRefusesWrites(t *testing.T) {
	tables.CheckReadOnlyOpenCreatesNothing(t, func(ctx context.Context, url, table string) (*Store, error) {
		return Open(ctx, url, Options{Table: table, ReadOnly: true})
	})
}
