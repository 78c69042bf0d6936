package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Tables opens a SQL backend's stores on tables of its test server: each
// test on tables of its own, dropped when the test ends.
type Tables[S interface {
	store.Store
	store.Migrator
	Close() error
}] struct {
	Server Server

	// Open opens a store on table of the server at url. With migrate
	// false the store never creates its table on first use.
	Open func(ctx context.Context, url, table string, migrate bool) (S, error)

	// Drop drops the table of s, an open store.
	Drop func(ctx context.Context, s S) error
}

// New opens a store on a table no other test uses, dropped when the test
// ends.
func (tb Tables[S]) New(t testing.TB) S {
	t.Helper()
	return tb.open(t, UniqueName("tenure_test_"), true, true)
}

// OpenTable opens a store on table; drop says whether this store's cleanup
// drops the table (only one store per table should).
func (tb Tables[S]) OpenTable(t testing.TB, table string, drop bool) S {
	t.Helper()
	return tb.open(t, table, true, drop)
}

func (tb Tables[S]) open(t testing.TB, table string, migrate, drop bool) S {
	t.Helper()
	url := tb.Server.URL(t)
	var dropFn func(context.Context, S) error
	if drop {
		dropFn = func(ctx context.Context, s S) error {
			if tb.Drop(ctx, s) == nil {
				return nil
			}
			// The test closed s, and the pool it owned with it.
			other, err := tb.Open(ctx, url, table, false)
			if err != nil {
				return err
			}
			defer other.Close()
			return tb.Drop(ctx, other)
		}
	}
	return Open(t, func(ctx context.Context) (S, error) { return tb.Open(ctx, url, table, migrate) }, dropFn)
}

// CheckBadTableNamesAreRefused checks that Open, and newOn (the backend's
// constructor on a handle of the caller's), refuse every name of
// [BadNames] with store.ErrInvalidName.
func (tb Tables[S]) CheckBadTableNamesAreRefused(t *testing.T, newOn func(table string) error) {
	t.Helper()
	url := tb.Server.URL(t)
	CheckBadNamesAreRefused(t, newOn)
	CheckBadNamesAreRefused(t, func(name string) error {
		s, err := tb.Open(Context(t), url, name, true)
		if err == nil {
			s.Close()
		}
		return err
	})
}

// CheckFirstCallsRaceToCreateOneTable opens four stores on a table that
// does not exist yet and checks that their first calls, made at once, all
// work: concurrent creation of a table must never fail a caller.
func (tb Tables[S]) CheckFirstCallsRaceToCreateOneTable(t *testing.T) {
	t.Helper()
	table := UniqueName("tenure_test_")
	stores := []store.Store{tb.OpenTable(t, table, true)}
	for range 3 {
		stores = append(stores, tb.OpenTable(t, table, false))
	}
	checkFirstCallsRace(t, stores)
}

// CheckMigrateCreatesTheTable opens a store that does not create its table
// on first use, on a table that does not exist: calls fail until Migrate,
// which may run twice, creates it.
func (tb Tables[S]) CheckMigrateCreatesTheTable(t *testing.T) {
	t.Helper()
	s := tb.open(t, UniqueName("tenure_test_"), false, true)
	if _, err := s.List(Context(t), ""); err == nil {
		t.Fatal("List worked without a table")
	}
	if err := s.Migrate(Context(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(Context(t)); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	MustAcquire(t, s, "job", "a", time.Minute, time.Second)
}

// CheckReadOnlyOpenCreatesNothing runs [CheckReadOnlyOpenCreatesNothing]
// on a table no test uses: openRO opens a read-only store on table of the
// server at url.
func (tb Tables[S]) CheckReadOnlyOpenCreatesNothing(t *testing.T, openRO func(ctx context.Context, url, table string) (S, error)) {
	t.Helper()
	url, table := tb.Server.URL(t), UniqueName("tenure_test_")
	CheckReadOnlyOpenCreatesNothing(t,
		func(ctx context.Context) (store.Store, error) { return openRO(ctx, url, table) },
		func() store.Store { return tb.OpenTable(t, table, true) })
}
