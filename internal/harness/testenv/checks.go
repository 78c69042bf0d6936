package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// BadNames are table names and namespaces that store.ValidateName must
// refuse: SQL and key-pattern syntax, a leading digit, non-ASCII, and one
// character too many.
var BadNames = []string{
	"x; drop table y", "x`y", `x"y`, "x'y", "1abc", "a-b", "a b", "db.table",
	"a/b", "{x}", "ñame", strings.Repeat("a", 64), "leases--",
}

// CheckBadNamesAreRefused calls use with every name of [BadNames] and
// checks that each is refused with store.ErrInvalidName.
func CheckBadNamesAreRefused(t *testing.T, use func(name string) error) {
	t.Helper()
	for _, name := range BadNames {
		if err := use(name); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("name %q: %v, want store.ErrInvalidName", name, err)
		}
	}
}

// checkFirstCallsRace makes the first calls of several stores on one table
// at the same time, four calls each, and checks that every call works and
// every record lands in the one table.
func checkFirstCallsRace(t *testing.T, stores []store.Store) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(stores))
	start := make(chan struct{})
	for i, s := range stores {
		for j := range 4 {
			wg.Go(func() {
				<-start
				_, err := s.Acquire(Context(t), store.AcquireRequest{Key: fmt.Sprintf("k%d-%d", i, j), Owner: "a", TTL: time.Minute})
				errs <- err
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(List(t, stores[0], "")); n != 4*len(stores) {
		t.Fatalf("%d leases in the table, want %d", n, 4*len(stores))
	}
}

// CheckTheLastRunningStateOfARepeatedTermWins renews a batch that names
// one term several times, as stores whose Renew documents it promise: each
// item gets the same answer and the last runner state is recorded.
func CheckTheLastRunningStateOfARepeatedTermWins(t *testing.T, s store.Store) {
	t.Helper()
	a := MustAcquire(t, s, "a", "me", time.Minute, time.Second)
	b := MustAcquire(t, s, "b", "me", time.Minute, time.Second)
	got := Renew(t, s, "me", time.Minute,
		store.RenewItem{Key: "a", Epoch: a, Running: true},
		store.RenewItem{Key: "b", Epoch: b, Running: false},
		store.RenewItem{Key: "a", Epoch: a, Running: false},
		store.RenewItem{Key: "b", Epoch: b, Running: true},
	)
	if !got[0] || !got[1] || !got[2] || !got[3] {
		t.Fatalf("Renew = %v, want every item renewed", got)
	}
	if l := LeaseOf(t, s, "a"); l.Running {
		t.Errorf("a: %+v; the last item (not running) should win", l)
	}
	if l := LeaseOf(t, s, "b"); !l.Running {
		t.Errorf("b: %+v; the last item (running) should win", l)
	}
}

// CheckReadOnlyOpenCreatesNothing checks a store opened read-only. While
// the store does not exist, openRO fails with store.ErrNotFound, and fails
// again, so the first open created nothing. Once create has made the store
// (and returned it open), openRO works, List shows a lease acquired through
// create's store, and every write — Acquire, Renew, Release, Revoke and
// Migrate where the store has them — fails with store.ErrReadOnly and
// changes nothing. openRO's stores are closed here.
func CheckReadOnlyOpenCreatesNothing(t *testing.T, openRO func(context.Context) (store.Store, error), create func() store.Store) {
	t.Helper()
	for range 2 {
		s, err := openRO(Context(t))
		if err == nil {
			closeStore(t, s)
			t.Fatal("a read-only open of a store that does not exist worked")
		}
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("read-only open of a store that does not exist: %v, want store.ErrNotFound", err)
		}
	}
	w := create()
	epoch := MustAcquire(t, w, "k", "owner", time.Minute, time.Second)
	s, err := openRO(Context(t))
	if err != nil {
		t.Fatalf("read-only open of an existing store: %v", err)
	}
	defer closeStore(t, s)
	ctx := Context(t)
	writes := map[string]error{}
	_, writes["Acquire"] = s.Acquire(ctx, store.AcquireRequest{Key: "k2", Owner: "owner", TTL: time.Minute})
	_, writes["Renew"] = s.Renew(ctx, "owner", time.Minute, []store.RenewItem{{Key: "k", Epoch: epoch}})
	writes["Release"] = s.Release(ctx, "owner", []store.Term{{Key: "k", Epoch: epoch}})
	if r, ok := s.(store.Revoker); ok {
		_, writes["Revoke"] = r.Revoke(ctx, "k")
	}
	if m, ok := s.(store.Migrator); ok {
		writes["Migrate"] = m.Migrate(ctx)
	}
	for call, err := range writes {
		if !errors.Is(err, store.ErrReadOnly) {
			t.Errorf("%s on a read-only store: %v, want store.ErrReadOnly", call, err)
		}
	}
	leases := List(t, s, "")
	if len(leases) != 1 || leases[0].Key != "k" || !leases[0].Live || leases[0].Epoch != epoch {
		t.Errorf("read-only List = %+v, want only k, live, at epoch %d, untouched", leases, epoch)
	}
}

func closeStore(t testing.TB, s store.Store) {
	t.Helper()
	if c, ok := s.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// CheckPruneGoesOnPastTheFirstBatch prunes nine dead records among five
// live ones, the store's batch set to 3 by the caller: every dead record
// goes, batch after batch, and every live one stays.
func CheckPruneGoesOnPastTheFirstBatch(t *testing.T, s store.Store) {
	t.Helper()
	var live []string
	for i := range 14 {
		key := fmt.Sprintf("batch/%02d", i)
		e := MustAcquire(t, s, key, "o", time.Hour, time.Second)
		if i%3 == 1 {
			live = append(live, key)
			continue
		}
		Release(t, s, "o", store.Term{Key: key, Epoch: e})
	}
	time.Sleep(5 * time.Millisecond) // the releases are older than the prune's 1ms, on the server's clock
	n, err := s.(store.Pruner).Prune(Context(t), "batch/", time.Millisecond)
	if err != nil || n != 9 {
		t.Fatalf("Prune = %d, %v; want the 9 released records, 3 per batch", n, err)
	}
	var left []string
	for _, l := range List(t, s, "batch/") {
		left = append(left, l.Key)
	}
	if !slices.Equal(left, live) {
		t.Errorf("after the prune %q are left, want the live %q", left, live)
	}
}
