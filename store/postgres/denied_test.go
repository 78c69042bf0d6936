package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// TestMissingRightsAreReportedAsDenied: no right to create the table, and
// no grant on a table that exists, are store.ErrDenied — permanent, so the
// engine can give up.
func TestMissingRightsAreReportedAsDenied(t *testing.T) {
	ctx := testenv.Context(t)
	noRights := testenv.PostgresWithoutRights(t)
	table := testenv.UniqueName("denied_")
	s, err := Open(ctx, noRights, Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrDenied) {
		t.Errorf("Acquire with no right to create the table: %v, want ErrDenied", err)
	}

	owner := tables.New(t) // a table the test's superuser made
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, noRights, Options{Table: owner.Table()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrDenied) {
		t.Errorf("Acquire on a table without grants: %v, want ErrDenied", err)
	}
	if _, err := other.List(ctx, ""); !errors.Is(err, store.ErrDenied) {
		t.Errorf("List on a table without grants: %v, want ErrDenied", err)
	}
	if _, err := owner.List(ctx, ""); err != nil {
		t.Errorf("List by the table's owner: %v", err)
	}
}
