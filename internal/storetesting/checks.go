package storetesting

import (
	"errors"
	"fmt"
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
