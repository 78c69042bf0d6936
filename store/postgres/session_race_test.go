package postgres

import (
	"context"
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

// holdRecord locks key's record from another transaction, as a peer's
// acquisition attempt does for a moment, until the returned func.
func holdRecord(t *testing.T, s *Store, key string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s.ident+` WHERE key = $1 FOR UPDATE`, key); err != nil {
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

// A renewal that goes term by term while another puts a term on the
// session must see that term (its snapshot is taken once it holds the
// session), or the term would live as long as the session with nobody
// listing it.
func TestATermPutOnDuringATermByTermRenewalIsSeenByIt(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	const ttl = time.Second
	a := sessiontest.Acquire(t, s, "a", "o", ttl)
	sessions.Renew(t, s, "o", ttl, a)
	j := sessiontest.Acquire(t, s, "j", "o", ttl) // on its own record until a renewal lists it

	release := holdRecord(t, s, "j")
	fast := make(chan error, 1)
	go func() { // puts j on: holds the session, waits for j's record
		_, err := s.Renew(ctx, "o", ttl, []store.RenewItem{{Key: "a", Epoch: a.Epoch}, {Key: "j", Epoch: j.Epoch}})
		fast <- err
	}()
	waitForLockWaiters(t, s, 1)
	slow := make(chan error, 1)
	go func() { // lists a term it never acquired: term by term, waits for the session
		_, err := s.Renew(ctx, "o", ttl, []store.RenewItem{{Key: "a", Epoch: a.Epoch}, {Key: "zz", Epoch: 1}})
		slow <- err
	}()
	waitForLockWaiters(t, s, 2)
	release()
	if err := <-fast; err != nil {
		t.Fatal(err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	// j's holder never lists it again; a is renewed on.
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) && sessiontest.LeaseOf(t, s, "j").Live {
		if got, _ := sessions.Renew(t, s, "o", ttl, a); !got[0] {
			t.Fatal("a lost")
		}
		time.Sleep(ttl / 5)
	}
	if l := sessiontest.LeaseOf(t, s, "j"); l.Live {
		t.Fatalf("j still live %v after its last listing: %+v", 4*ttl, l)
	}
}

// A revocation racing a renewal that puts the term on a session still
// revokes it: Revoke answers false only for a key with no live term.
func TestARevocationRacingARenewalThatMovesTheTermRevokesIt(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	const ttl = time.Minute
	a := sessiontest.Acquire(t, s, "a", "o", ttl)
	sessions.Renew(t, s, "o", ttl, a)
	j := sessiontest.Acquire(t, s, "j", "o", ttl)
	release := holdRecord(t, s, "j")
	renewed := make(chan error, 1)
	go func() {
		_, err := s.Renew(ctx, "o", ttl, []store.RenewItem{{Key: "a", Epoch: a.Epoch}, {Key: "j", Epoch: j.Epoch}})
		renewed <- err
	}()
	waitForLockWaiters(t, s, 1)
	type answer struct {
		ok  bool
		err error
	}
	revoked := make(chan answer, 1)
	go func() {
		ok, err := s.Revoke(ctx, "j")
		revoked <- answer{ok, err}
	}()
	waitForLockWaiters(t, s, 2)
	release()
	if err := <-renewed; err != nil {
		t.Fatal(err)
	}
	if r := <-revoked; r.err != nil || !r.ok {
		t.Fatalf("Revoke of live j = %t, %v; want revoked (j: %+v)", r.ok, r.err, sessiontest.LeaseOf(t, s, "j"))
	}
	if l := sessiontest.LeaseOf(t, s, "j"); l.Owner != "" || l.Live {
		t.Fatalf("j after the revocation: %+v", l)
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
	w, err := Open(ctx, testenv.Postgres.URL(t), Options{Table: s.table, NoAutoMigrate: true})
	if err == nil {
		w.Close()
		t.Fatal("Open with NoAutoMigrate accepted a table from before sessions")
	}
	if !strings.Contains(err.Error(), "tenure migrate") {
		t.Fatalf("Open: %v; want it to say to run tenure migrate", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w, err = Open(ctx, testenv.Postgres.URL(t), Options{Table: s.table, NoAutoMigrate: true})
	if err != nil {
		t.Fatalf("Open once migrated: %v", err)
	}
	w.Close()
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// A renewal of the session alone that waits behind a transaction holding
// the session row (a peer's acquisition attempt locks it) reads the clock
// once it holds it: a session that expired meanwhile stays dead, and its
// term is lost, not renewed with a stamp from before the wait.
func TestARenewalThatWaitsForItsSessionReadsTheClockAfterTheWait(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	k := sessiontest.Acquire(t, s, "k", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k) // k goes on the session
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s.sess.table+` WHERE id = $1 FOR UPDATE`, sessions.SessionOf(t, s, "k")); err != nil {
		t.Fatal(err)
	}
	got := make(chan []bool, 1)
	go func() {
		ok, err := s.Renew(ctx, "a", ttl, []store.RenewItem{{Key: "k", Epoch: k.Epoch}})
		if err != nil {
			t.Error(err)
		}
		got <- ok
	}()
	waitForLockWaiters(t, s, 1)
	time.Sleep(ttl + 100*time.Millisecond) // the session expires on the server's clock
	_ = tx.Rollback(ctx)
	if ok := <-got; len(ok) != 1 || ok[0] {
		t.Fatalf("renewal that waited past the session's expiry = %v; want lost", ok)
	}
	if l := sessiontest.LeaseOf(t, s, "k"); l.Live {
		t.Fatalf("k live again after its session expired: %+v", l)
	}
}

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
