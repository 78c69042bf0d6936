package sqlite

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// sessions drives the shared session suite, and this package's own
// session tests, on a file of its own per test.
var sessions = sessiontest.Harness{
	Open: func(t *testing.T) sessiontest.Store { return openTemp(t, Options{}) },
	Another: func(t *testing.T, s sessiontest.Store) sessiontest.Store {
		return openAt(t, s.(*Store).path, Options{})
	},
	SlowRenewals: slowRenewals.Load,
	SessionOf: func(t *testing.T, st sessiontest.Store, key string) int64 {
		t.Helper()
		s := st.(*Store)
		var id int64
		if err := s.db.QueryRow(`SELECT session FROM `+s.table+` WHERE key = ?`, key).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	},
	Sessions: func(t *testing.T, st sessiontest.Store) (n int) {
		t.Helper()
		s := st.(*Store)
		if err := s.db.QueryRow(`SELECT count(*) FROM ` + sessionTable(s.table)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	},
}

func TestSessions(t *testing.T) { sessiontest.Run(t, sessions) }

// A version of this package from before sessions reads only a record's own
// expires_at: it must see a term on a session as live, and never take it.
func TestATermOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := openTemp(t, Options{})
	k := sessiontest.Acquire(t, s, "k", "a", time.Second)
	sessions.Renew(t, s, "a", time.Second, k)
	legacy := buildQueries(s.table, false)
	var epoch int64
	err := s.db.QueryRow(legacy.acquire, "k", "b", time.Second.Microseconds(), 1, time.Second.Microseconds(), 0).Scan(&epoch)
	if err == nil {
		t.Fatalf("the acquisition of a version without sessions took a's live term (epoch %d)", epoch)
	}
	var owner string
	var left int64
	if err := s.db.QueryRow(legacy.holder, "k").Scan(&owner, new(int64), new(int64), new(int64), &left); err != nil {
		t.Fatal(err)
	}
	if owner != "a" || time.Duration(left)*time.Microsecond <= 0 {
		t.Fatalf("a version without sessions sees k held by %q with %v left; want a's, live", owner, time.Duration(left)*time.Microsecond)
	}
}

// A table made before sessions: a read-only Store lists it as it is, and a
// Store that opens it to write adds the column and moves its terms, which
// renew, onto a session.
func TestATableFromBeforeSessionsIsReadAndMigrated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	old := openAt(t, path, Options{})
	if _, err := old.db.Exec(`DROP TABLE ` + old.table); err != nil {
		t.Fatal(err)
	}
	legacy := buildQueries(old.table, false)
	create := legacy.create[:len(legacy.create)-len(",\n\tsession       INTEGER NOT NULL DEFAULT 0\n) WITHOUT ROWID")] + "\n) WITHOUT ROWID"
	if _, err := old.db.Exec(create); err != nil {
		t.Fatalf("create the old table: %v\n%s", err, create)
	}
	var epoch int64
	if err := old.db.QueryRow(legacy.acquire, "k", "a", time.Minute.Microseconds(), 1, 0, 0).Scan(&epoch); err != nil {
		t.Fatal(err)
	}

	ro := openAt(t, path, Options{ReadOnly: true})
	sessions.AnOldTableIsReadThenMigrated(t, ro, func() sessiontest.Store { return openAt(t, path, Options{}) }, epoch)
}

// A version of this package from before sessions revokes a term (tenure
// release) by emptying its owner alone; the holder must still find
// it lost at its next renewal, and peers wait for the expiry it had.
func TestARevocationByAVersionWithoutSessionsReachesTheHolder(t *testing.T) {
	s := openTemp(t, Options{})
	const ttl = time.Minute
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k1, k2)
	const oldRevoke = `UPDATE %s SET owner = '', epoch = epoch + 1, released = 0, running = 0, updated_at = ` + nowUS + `
WHERE key = ?1 AND owner <> '' AND released = 0 AND expires_at > ` + nowUS + ` RETURNING epoch`
	var epoch int64
	if err := s.db.QueryRow(fmt.Sprintf(oldRevoke, s.table), "k1").Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	got, slow := sessions.Renew(t, s, "a", ttl, k1, k2)
	if got[0] || !got[1] || !slow {
		t.Fatalf("renewal after an old version revoked k1: %v, slow %t; want [false true], term by term", got, slow)
	}
	if l := sessiontest.LeaseOf(t, s, "k1"); l.Live || l.Owner != "" || l.TimeLeft <= 0 || l.TimeLeft > ttl {
		t.Fatalf("k1 after the old revocation: %+v; want owned by nobody, blocking for what was left of its term", l)
	}
}

// Drop leaves nothing of a table behind in the file: not its session
// table (tenure verify drops its scratch table so, in a file of the
// user's).
func TestDropLeavesNothingOfTheTableBehind(t *testing.T) {
	s := openTemp(t, Options{})
	k := sessiontest.Acquire(t, s, "k", "a", time.Minute)
	sessions.Renew(t, s, "a", time.Minute, k)
	if err := s.Drop(t.Context()); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE ? || '%'`, s.table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d objects named after the table left behind (%v)", n, err)
	}
}
