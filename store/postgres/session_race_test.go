package postgres

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// Races and losses a reviewer found in the first version of sessions; each
// test failed on it.

// TestSessionRaces runs the races a lock held from another transaction
// makes deterministic (sessiontest.RunRaces).
func TestSessionRaces(t *testing.T) {
	sessiontest.RunRaces(t, sessions, sessiontest.Locks{
		HoldRecord: func(t *testing.T, s sessiontest.Store, key string) func() {
			return holdRow(t, s.(*Store), `SELECT 1 FROM `+s.(*Store).ident+` WHERE key = $1 FOR UPDATE`, key)
		},
		HoldSession: func(t *testing.T, s sessiontest.Store, id int64) func() {
			return holdRow(t, s.(*Store), `SELECT 1 FROM `+s.(*Store).sess.table+` WHERE id = $1 FOR UPDATE`, id)
		},
		WaitForLockWaiters: func(t *testing.T, s sessiontest.Store, n int) { waitForLockWaiters(t, s.(*Store), n) },
	})
}

// holdRow locks the row query selects from another transaction, as a
// peer's statement does for a moment, until the returned func.
func holdRow(t *testing.T, s *Store, query string, arg any) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, query, arg); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// waitForLockWaiters returns once n statements on s's table wait for a lock.
func waitForLockWaiters(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, strings.Trim(s.ident, `"`)).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements wait for a lock after 10s; want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A change the server lost (an asynchronous release, then a crash or a
// failover) takes the session's version back; another change then brings
// it to the version the Store knows with other terms on it. The tag drawn
// with each change tells them apart, so the renewal goes term by term and
// finds the revoked term lost.
func TestAVersionReachedAgainAfterALostChangeIsToldApart(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	const ttl = time.Minute
	x, y, z := sessiontest.Acquire(t, s, "x", "a", ttl), sessiontest.Acquire(t, s, "y", "a", ttl), sessiontest.Acquire(t, s, "z", "a", ttl)
	sessions.Renew(t, s, "a", ttl, x, y, z)
	id := sessions.SessionOf(t, s, "x")
	var tag int64
	if err := s.pool.QueryRow(ctx, `SELECT tag FROM `+s.sess.table+` WHERE id = $1`, id).Scan(&tag); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "a", []store.Term{x}); err != nil {
		t.Fatal(err)
	}
	// The server loses the release.
	for _, q := range []string{
		`UPDATE ` + s.ident + ` SET released = false, session = $1, expires_at = ` + onSession + ` WHERE key = 'x'`,
		`UPDATE ` + s.sess.table + ` SET version = version - 1, tag = ` + itoa64(tag) + ` WHERE id = $1`,
	} {
		if _, err := s.pool.Exec(ctx, q, id); err != nil {
			t.Fatal(err)
		}
	}
	other := tables.OpenTable(t, s.table, false)
	if ok, err := other.Revoke(ctx, "y"); err != nil || !ok {
		t.Fatalf("revoke: %t %v", ok, err)
	}
	if got, slow := sessions.Renew(t, s, "a", ttl, y, z); got[0] || !got[1] || !slow {
		t.Fatalf("renewal after y was revoked: %v, slow %t; want [false true], term by term (y: %+v)", got, slow, sessiontest.LeaseOf(t, s, "y"))
	}
}

// A Store that may not migrate its table refuses, at Open, a table made
// before sessions, saying what to run: every call would fail on it.
func TestAStoreThatMayNotMigrateRefusesATableFromBeforeSessions(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE ` + s.ident + ` DROP COLUMN session CASCADE`, `DROP TABLE ` + s.sess.table} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	sessiontest.NoAutoMigrateWaitsForMigrate(t, func(ctx context.Context) (io.Closer, error) {
		return Open(ctx, testenv.Postgres.URL(t), Options{Table: s.table, NoAutoMigrate: true})
	}, s.Migrate)
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// Adding the session column to a table from before sessions takes the
// table's exclusive lock, which waits behind any open transaction (a long
// query, a pg_dump) while every later statement waits behind it: the
// renewals of the replicas still running the older version. The
// migration must let them through while it waits, and finish once the
// transaction ends.
func TestAMigrationBehindALongTransactionHoldsUpNoRenewal(t *testing.T) {
	s := tableFromBeforeSessions(t)
	ctx := context.Background()
	long, err := s.pool.Begin(ctx) // a long read of the table
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx) //nolint:errcheck // ended below
	if _, err := long.Exec(ctx, `SELECT 1 FROM `+s.ident+` LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	w := tables.OpenTable(t, s.table, false)
	migrated := make(chan error, 1)
	go func() {
		mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		migrated <- w.Migrate(mctx)
	}()
	waitForLockWaiters(t, s, 1) // the migration waits for the long read
	// An older replica's renewal of its term, sent while the migration waits.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(rctx, `UPDATE `+s.ident+` SET expires_at = clock_timestamp() + interval '1 minute' WHERE key = 'k'`); err != nil {
		t.Fatalf("an older replica's renewal while the migration waits: %v", err)
	}
	select {
	case err := <-migrated:
		t.Fatalf("the migration ended (%v) before the renewal it held up got through", err)
	default:
	}
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("the migration once the long read ended: %v", err)
	}
}
