package mysql

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// noRightsURL is the test server's URL for a user that may read the test
// database and do nothing else.
func noRightsURL(t *testing.T) string {
	t.Helper()
	base := testenv.MySQL.URL(t)
	cfg, _, err := ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []string{
		"CREATE USER IF NOT EXISTS 'tenure_norights'@'%'",
		"GRANT SELECT ON `" + cfg.DBName + "`.* TO 'tenure_norights'@'%'",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("tenure_norights")
	return u.String()
}

// TestMissingRightsAreReportedAsDenied: no right to create the table, and
// no right to write a table that exists, are store.ErrDenied — permanent,
// so the engine can give up.
func TestMissingRightsAreReportedAsDenied(t *testing.T) {
	ctx := testenv.Context(t)
	noRights := noRightsURL(t)
	s, err := Open(ctx, noRights, Options{Table: testenv.UniqueName("denied_")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrDenied) {
		t.Errorf("Acquire with no right to create the table: %v, want ErrDenied", err)
	}

	owner := tables.New(t) // a table the test's root user made
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, noRights, Options{Table: owner.table})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrDenied) {
		t.Errorf("Acquire on a table it may only read: %v, want ErrDenied", err)
	}
	if _, err := other.List(ctx, ""); err != nil {
		t.Errorf("List on a table it may read: %v", err)
	}
}
