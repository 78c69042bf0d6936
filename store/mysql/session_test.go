package mysql

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// sessions drives the shared session suite, and this package's own
// session tests, on tables of their own.
var sessions = sessiontest.Harness{
	Open: func(t *testing.T) sessiontest.Store { return tables.New(t) },
	Another: func(t *testing.T, s sessiontest.Store) sessiontest.Store {
		return tables.OpenTable(t, s.(*Store).table, false)
	},
	SlowRenewals: slowRenewals.Load,
	SessionOf: func(t *testing.T, st sessiontest.Store, key string) int64 {
		t.Helper()
		s := st.(*Store)
		var id int64
		if err := s.db.QueryRow("SELECT session FROM `"+s.table+"` WHERE lease_key = ?", []byte(key)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	},
	Sessions: func(t *testing.T, st sessiontest.Store) (n int) {
		t.Helper()
		s := st.(*Store)
		if err := s.db.QueryRow(`SELECT COUNT(*) FROM ` + sessionTable(s.table)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	},
}

func TestSessions(t *testing.T) { sessiontest.Run(t, sessions) }

// legacy is the SQL of this package's version before sessions, for the
// tests of mixed versions: what it creates, how it acquires an existing
// record, reads a holder and revokes.
func legacy(table string) (create, takeOver, insert, holder, revoke string) {
	r := strings.NewReplacer("{t}", "`"+table+"`", "{now}", nowUS, "{start}", startUS)
	return r.Replace(`CREATE TABLE {t} (
	lease_key  VARBINARY(512) NOT NULL,
	owner      VARBINARY(512) NOT NULL,
	epoch      BIGINT         NOT NULL,
	expires_at BIGINT         NOT NULL,
	released   BOOLEAN        NOT NULL DEFAULT FALSE,
	running    BOOLEAN        NOT NULL DEFAULT FALSE,
	updated_at BIGINT         NOT NULL,
	renew_id   BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (lease_key)
) ENGINE=InnoDB`),
		r.Replace(`UPDATE {t} SET owner = UNHEX(?), epoch = LAST_INSERT_ID(epoch + 1), expires_at = {now} + ?,
	released = FALSE, running = ?, updated_at = {now}
WHERE lease_key = UNHEX(?) AND (released OR owner = UNHEX(?) OR expires_at + ? <= {now})`),
		r.Replace(`INSERT IGNORE INTO {t} (lease_key, owner, epoch, expires_at, released, running, updated_at)
SELECT UNHEX(?), UNHEX(?), LAST_INSERT_ID(COALESCE(MAX(f.epoch), 0) + 1), {now} + ?, FALSE, ?, {now}
FROM {t} AS f WHERE f.lease_key = '' LOCK IN SHARE MODE`),
		r.Replace(`SELECT owner, epoch, released, running, expires_at - {start} FROM {t} WHERE lease_key = UNHEX(?)`),
		r.Replace(`UPDATE {t} SET owner = '', epoch = LAST_INSERT_ID(epoch + 1), released = FALSE, running = FALSE, updated_at = {now}
WHERE lease_key = UNHEX(?) AND NOT released AND owner <> '' AND expires_at > {now}`)
}

// tableFromBeforeSessions makes a table as a version from before sessions
// did, holding a's term on "k" for ttl (running), and returns a Store on
// it (its cleanup drops it; no call of it made the table migrate) and the
// term's epoch.
func tableFromBeforeSessions(t *testing.T, ttl time.Duration) (*Store, int64) {
	t.Helper()
	old := tables.New(t)
	ctx := testenv.Context(t)
	create, _, insert, _, _ := legacy(old.table)
	if _, err := old.db.ExecContext(ctx, create); err != nil {
		t.Fatal(err)
	}
	r, err := old.db.ExecContext(ctx, insert, hexString("k"), hexString("a"), ttl.Microseconds(), true)
	var epoch int64
	if err == nil {
		epoch, err = r.LastInsertId()
	}
	if err != nil {
		t.Fatal(err)
	}
	return old, epoch
}

// A version of this package from before sessions reads only a record's own
// expires_at: it must see a term on a session as live, and never take it.
func TestATermOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := tables.New(t)
	ctx := testenv.Context(t)
	k := sessiontest.Acquire(t, s, "k", "a", time.Second)
	sessions.Renew(t, s, "a", time.Second, k)
	_, takeOver, _, holder, _ := legacy(s.table)
	r, err := s.db.ExecContext(ctx, takeOver, hexString("b"), time.Second.Microseconds(), true, hexString("k"), hexString("b"), time.Second.Microseconds())
	if n, err := affected(r, err); err != nil || n != 0 {
		t.Fatalf("the acquisition of a version without sessions took a's live term: %d rows, %v", n, err)
	}
	var (
		owner             string
		released, running bool
		epoch, left       int64
	)
	if err := s.db.QueryRowContext(ctx, holder, hexString("k")).Scan(&owner, &epoch, &released, &running, &left); err != nil {
		t.Fatal(err)
	}
	if owner != "a" || left <= 0 {
		t.Fatalf("a version without sessions sees k held by %q with %v left; want a's, live", owner, time.Duration(left)*time.Microsecond)
	}
}

// A table made before sessions: a read-only Store lists it as it is, and a
// Store that opens it to write adds the column (and its index) and the
// session table, and moves its terms, which renew, onto a session.
func TestATableFromBeforeSessionsIsReadAndMigrated(t *testing.T) {
	old, epoch := tableFromBeforeSessions(t, time.Minute)
	ctx := testenv.Context(t)

	ro, err := Open(ctx, testenv.MySQL.URL(t), Options{Table: old.table, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	sessions.AnOldTableIsReadThenMigrated(t, ro, func() sessiontest.Store { return tables.OpenTable(t, old.table, false) }, epoch)
}

// A version of this package from before sessions revokes a term (tenure
// release) by emptying its owner alone, and leaves it on its session with
// the far expires_at. Meanwhile List shows it owned by nobody and
// blocking until the session's expiry, and a takeover waits for that
// expiry + grace; the holder's next renewal finds a record of another
// owner on its session, goes term by term and finds it lost, and takes it
// off the session, blocking for a TTL at most.
func TestARevocationByAVersionWithoutSessionsReachesTheHolder(t *testing.T) {
	s := tables.New(t)
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k1, k2)
	_, _, _, _, revoke := legacy(s.table)
	if r, err := s.db.ExecContext(ctx, revoke, hexString("k1")); err != nil {
		t.Fatal(err)
	} else if n, _ := r.RowsAffected(); n != 1 {
		t.Fatalf("the old revocation changed %d rows", n)
	}
	blocking := func(when string) store.Lease {
		t.Helper()
		l := sessiontest.LeaseOf(t, s, "k1")
		if l.Live || l.Owner != "" || l.Epoch != k1.Epoch+1 || l.TimeLeft <= 0 || l.TimeLeft > ttl {
			t.Fatalf("k1 %s: %+v; want owned by nobody at epoch %d, blocking for what was left of its term", when, l, k1.Epoch+1)
		}
		return l
	}
	blocking("after the old revocation")
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "k1", Owner: "b", TTL: ttl, Grace: time.Second})
	if err != nil || res.Acquired || res.Holder.Live || res.Holder.Owner != "" || res.Holder.TimeLeft <= 0 {
		t.Fatalf("b's acquisition of k1 before its session's expiry: %+v, %v; want refused, shown owned by nobody and blocking", res, err)
	}
	got, slow := sessions.Renew(t, s, "a", ttl, k1, k2)
	if got[0] || !got[1] || !slow {
		t.Fatalf("renewal after an old version revoked k1: %v, slow %t; want [false true], term by term", got, slow)
	}
	if l := blocking("after the holder's renewal"); sessions.SessionOf(t, s, "k1") != 0 {
		t.Fatalf("k1 after the holder's renewal: %+v on session %d; want off the session, blocking for a TTL at most", l, sessions.SessionOf(t, s, "k1"))
	}
}

// A Store that may not migrate its table refuses, at Open, a table made
// before sessions, saying what to run: every call would fail on it.
func TestAStoreThatMayNotMigrateRefusesATableFromBeforeSessions(t *testing.T) {
	s := tables.New(t)
	ctx := testenv.Context(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"ALTER TABLE `" + s.table + "` DROP KEY session, DROP COLUMN session",
		"DROP TABLE " + sessionTable(s.table),
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	sessiontest.NoAutoMigrateWaitsForMigrate(t, func(ctx context.Context) (io.Closer, error) {
		return Open(ctx, testenv.MySQL.URL(t), Options{Table: s.table, NoAutoMigrate: true})
	}, s.Migrate)
}

// Long table names get session tables of their own, within MySQL's 64
// characters.
func TestLongTableNamesGetNamesOfTheirOwn(t *testing.T) {
	a, b := strings.Repeat("t", 62)+"a", strings.Repeat("t", 62)+"b"
	for _, name := range []string{sessionTableName(a), sessionTableName(b)} {
		if len(name) > maxIdent {
			t.Errorf("%q is %d characters long", name, len(name))
		}
	}
	if sessionTableName(a) == sessionTableName(b) {
		t.Error("two tables share a session table")
	}
}

// Adding the session column to a table from before sessions waits for the
// table's metadata lock behind any open transaction that has used it (a
// long query, a dump), while every later statement on the table waits
// behind it: the renewals of the replicas still running the older
// version. The migration must let them through while it waits, and finish
// once the transaction ends.
func TestAMigrationBehindALongTransactionHoldsUpNoRenewal(t *testing.T) {
	old, _ := tableFromBeforeSessions(t, time.Minute)
	ctx := testenv.Context(t)
	long, err := old.db.BeginTx(ctx, nil) // a long read of the table
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback() //nolint:errcheck // ended below
	if _, err := long.ExecContext(ctx, "SELECT 1 FROM `"+old.table+"` LIMIT 1"); err != nil {
		t.Fatal(err)
	}
	w := tables.OpenTable(t, old.table, false)
	migrated := make(chan error, 1)
	go func() {
		mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		migrated <- w.Migrate(mctx)
	}()
	waitForMetadataLock(t, old, "ALTER TABLE") // the migration waits for the long read
	// An older replica's renewal of its term, sent while the migration
	// waits, with a call timeout of the default's (RenewEvery/2).
	rctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	renew := strings.NewReplacer("{t}", "`"+old.table+"`", "{now}", nowUS).Replace(
		`UPDATE {t} SET expires_at = {now} + 60000000 WHERE lease_key = 'k' AND owner = 'a'`)
	if _, err := old.db.ExecContext(rctx, renew); err != nil {
		t.Fatalf("an older replica's renewal while the migration waits: %v", err)
	}
	select {
	case err := <-migrated:
		t.Fatalf("the migration ended (%v) before the renewal it held up got through", err)
	default:
	}
	if err := long.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("the migration once the long read ended: %v", err)
	}
}
