package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// sessions drives the shared session suite, and this package's own
// session tests, on a table of its own per test.
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
		if err := s.pool.QueryRow(context.Background(), `SELECT session FROM `+s.ident+` WHERE key = $1`, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	},
	Sessions: func(t *testing.T, st sessiontest.Store) (n int) {
		t.Helper()
		s := st.(*Store)
		if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+s.sess.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	},
}

func TestSessions(t *testing.T) { sessiontest.Run(t, sessions) }

// A version of this package from before sessions reads only a record's own
// expires_at: it must see a term on a session as live.
func TestATermOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := tables.New(t)
	k := sessiontest.Acquire(t, s, "k", "a", time.Second)
	sessions.Renew(t, s, "a", time.Second, k)
	var live bool
	if err := s.pool.QueryRow(context.Background(), `SELECT expires_at > clock_timestamp() + interval '50 years' FROM `+s.ident+` WHERE key = 'k'`).Scan(&live); err != nil || !live {
		t.Fatalf("a term on a session has an expires_at an older version would read as expired (%t, %v)", live, err)
	}
}

// A table made before sessions: a read-only Store lists it as it is, and a
// Store that opens it to write adds the column and the session table and
// moves its terms, which renew, onto a session.
func TestATableFromBeforeSessionsIsReadAndMigrated(t *testing.T) {
	s := tableFromBeforeSessions(t)
	ctx := context.Background()
	ro, err := Open(ctx, testenv.Postgres.URL(t), Options{Table: s.table, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	sessions.AnOldTableIsReadThenMigrated(t, ro, func() sessiontest.Store { return tables.OpenTable(t, s.table, false) }, 7)
}

// A version of this package from before sessions revokes a term (tenure
// release) by emptying its owner alone; the holder must still find
// it lost at its next renewal, and peers wait for the expiry it had.
func TestARevocationByAVersionWithoutSessionsReachesTheHolder(t *testing.T) {
	s := tables.New(t)
	const ttl = time.Minute
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k1, k2)
	oldRevoke := `UPDATE ` + s.ident + ` AS l SET owner = '', epoch = l.epoch + 1, released = false, running = false,
	updated_at = clock_timestamp()
WHERE l.key = $1 AND NOT l.released AND l.owner <> '' AND l.expires_at > clock_timestamp()`
	if tag, err := s.pool.Exec(context.Background(), oldRevoke, "k1"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the old revocation: %v %v", tag, err)
	}
	got, slow := sessions.Renew(t, s, "a", ttl, k1, k2)
	if got[0] || !got[1] || !slow {
		t.Fatalf("renewal after an old version revoked k1: %v, slow %t; want [false true], term by term", got, slow)
	}
	if l := sessiontest.LeaseOf(t, s, "k1"); l.Live || l.Owner != "" || l.TimeLeft <= 0 || l.TimeLeft > ttl {
		t.Fatalf("k1 after the old revocation: %+v; want owned by nobody, blocking for what was left of its term", l)
	}
}

// tableFromBeforeSessions opens a Store on a table as a version from
// before sessions made it (no session column, no session table, no
// trigger), holding a's live term on "k" at epoch 7.
func tableFromBeforeSessions(t *testing.T) *Store {
	t.Helper()
	s := tables.New(t)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE ` + s.ident + ` DROP COLUMN session CASCADE`, `DROP TABLE ` + s.sess.table,
		`INSERT INTO ` + s.ident + ` (key, owner, epoch, expires_at, released, running, updated_at)
		VALUES ('k', 'a', 7, clock_timestamp() + interval '1 minute', false, true, clock_timestamp())`} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Two tables whose names share their first 54 bytes share a session table
// and a trigger function (their names are cut short): dropping one table
// must leave them, or the other table's live terms would end at once.
func TestDroppingATableLeavesASessionTableItShares(t *testing.T) {
	ctx := context.Background()
	long := testenv.UniqueName("tenure_test_")
	long += strings.Repeat("x", 55-len(long))
	a, b := tables.OpenTable(t, long+"_a", true), tables.OpenTable(t, long+"_b", true)
	t.Cleanup(func() {
		_, _ = b.pool.Exec(ctx, `DROP TABLE IF EXISTS `+b.sess.table)
		_, _ = b.pool.Exec(ctx, `DROP FUNCTION IF EXISTS `+revokedFunction(b.ident)+`() CASCADE`)
	})
	if a.sess.table != b.sess.table {
		t.Fatalf("session tables %s and %s: the names were meant to share one", a.sess.table, b.sess.table)
	}
	sessiontest.Acquire(t, a, "k", "a", time.Minute)
	k := sessiontest.Acquire(t, b, "k", "b", time.Minute)
	sessions.Renew(t, b, "b", time.Minute, k)
	if err := a.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if l := sessiontest.LeaseOf(t, b, "k"); !l.Live {
		t.Fatalf("b's term after the other table was dropped: %+v", l)
	}
	if got, _ := sessions.Renew(t, b, "b", time.Minute, k); !got[0] {
		t.Fatal("b's term was not renewed after the other table was dropped")
	}
}

// Drop leaves nothing of a table behind: not its session table, not the
// function of its trigger (tenure verify drops its scratch table so).
func TestDropLeavesNothingOfTheTableBehind(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	k := sessiontest.Acquire(t, s, "k", "a", time.Minute)
	sessions.Renew(t, s, "a", time.Minute, k)
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := s.pool.Query(ctx, `SELECT tablename::text FROM pg_tables WHERE starts_with(tablename, $1)
UNION ALL SELECT proname::text FROM pg_proc WHERE starts_with(proname, $1)`, s.table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		left = append(left, name)
	}
	if err := rows.Err(); err != nil || len(left) > 0 {
		t.Fatalf("left behind: %v (%v)", left, err)
	}
}
