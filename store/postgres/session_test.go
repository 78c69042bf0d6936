package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// renewAll renews terms of owner with ttl and reports what each got and
// whether the renewal went term by term. Tests using it do not run in
// parallel (slowRenewals is the package's).
func renewAll(t *testing.T, s *Store, owner string, ttl time.Duration, terms ...store.Term) (got []bool, slow bool) {
	t.Helper()
	items := make([]store.RenewItem, len(terms))
	for i, tm := range terms {
		items[i] = store.RenewItem{Key: tm.Key, Epoch: tm.Epoch, Running: true}
	}
	before := slowRenewals.Load()
	got, err := s.Renew(context.Background(), owner, ttl, items)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	return got, slowRenewals.Load() != before
}

func acquireFor(t *testing.T, s *Store, key, owner string, ttl time.Duration) store.Term {
	t.Helper()
	res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: ttl / 4, Running: true})
	if err != nil || !res.Acquired {
		t.Fatalf("%s could not acquire %q: %+v %v", owner, key, res.Holder, err)
	}
	return store.Term{Key: key, Epoch: res.Epoch}
}

func leaseOf(t *testing.T, s *Store, key string) store.Lease {
	t.Helper()
	ls, err := s.List(context.Background(), key)
	if err != nil || len(ls) == 0 || ls[0].Key != key {
		t.Fatalf("List(%q): %v %v", key, ls, err)
	}
	return ls[0]
}

func sessionOf(t *testing.T, s *Store, key string) int64 {
	t.Helper()
	var id int64
	if err := s.pool.QueryRow(context.Background(), `SELECT session FROM `+s.ident+` WHERE key = $1`, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Terms acquired go on the session at their first renewal, which writes
// the session and them alone; the renewals after that write the session
// alone. Anything changed behind the Store's back sends a renewal term by
// term, which answers per term, and the one after it is fast again.
func TestARenewalOfTheSessionsTermsWritesTheSessionAlone(t *testing.T) {
	s := tables.New(t)
	const ttl = time.Minute
	k1, k2, k3 := acquireFor(t, s, "k1", "a", ttl), acquireFor(t, s, "k2", "a", ttl), acquireFor(t, s, "k3", "a", ttl)
	for round := range 2 {
		if got, slow := renewAll(t, s, "a", ttl, k1, k2, k3); slow || !got[0] || !got[1] || !got[2] {
			t.Fatalf("renewal %d: %v, slow %t; want all renewed, on the session alone", round, got, slow)
		}
	}
	if sessionOf(t, s, "k2") == 0 {
		t.Fatal("k2 is not on a session after its renewals")
	}
	if ok, err := s.Revoke(context.Background(), "k2"); err != nil || !ok {
		t.Fatalf("Revoke: %t %v", ok, err)
	}
	got, slow := renewAll(t, s, "a", ttl, k1, k2, k3)
	if !slow || !got[0] || got[1] || !got[2] {
		t.Fatalf("renewal after k2 was revoked: %v, slow %t; want [true false true], term by term", got, slow)
	}
	if got, slow := renewAll(t, s, "a", ttl, k1, k3); slow || !got[0] || !got[1] {
		t.Fatalf("renewal of what is left: %v, slow %t; want all renewed, on the session alone", got, slow)
	}
	// Another Store on the table releases a's k3 (an owner's two handles).
	other := tables.OpenTable(t, s.table, false)
	if err := other.Release(context.Background(), "a", []store.Term{k3}); err != nil {
		t.Fatal(err)
	}
	got, slow = renewAll(t, s, "a", ttl, k1, k3)
	if !slow || !got[0] || got[1] {
		t.Fatalf("renewal after another handle released k3: %v, slow %t; want [true false], term by term", got, slow)
	}
}

// A term no renewal lists any more leaves the session with the expiry the
// session had then, and ends on its own while the session lives on; and
// acquisitions, which start terms on their own records, never extend it.
func TestATermNoRenewalListsEndsOnItsOwn(t *testing.T) {
	s := tables.New(t)
	const ttl = 900 * time.Millisecond
	kept, dropped := acquireFor(t, s, "kept", "a", ttl), acquireFor(t, s, "dropped", "a", ttl)
	renewAll(t, s, "a", ttl, kept, dropped)
	if got, slow := renewAll(t, s, "a", ttl, kept); !slow || !got[0] {
		t.Fatalf("renewal of kept alone: %v, slow %t; want renewed, term by term", got, slow)
	}
	if l := leaseOf(t, s, "dropped"); !l.Live || l.TimeLeft > ttl || sessionOf(t, s, "dropped") != 0 {
		t.Fatalf("dropped right after the renewal that left it out: %+v on session %d; want live, off the session", l, sessionOf(t, s, "dropped"))
	}
	deadline := time.Now().Add(3 * ttl)
	for i := 0; time.Now().Before(deadline) && leaseOf(t, s, "dropped").Live; i++ {
		if got, _ := renewAll(t, s, "a", ttl, kept); !got[0] {
			t.Fatalf("kept not renewed: %v", got)
		}
		acquireFor(t, s, "busy", "a", ttl) // acquisitions go on meanwhile
		time.Sleep(ttl / 6)
	}
	if l := leaseOf(t, s, "dropped"); l.Live {
		t.Fatalf("dropped still live %v after its last renewal, the session renewed throughout: %+v", 3*ttl, l)
	}
	if !leaseOf(t, s, "kept").Live {
		t.Fatal("kept ended with dropped")
	}
}

// A session that is renewed no more ends with every term on it, however
// many acquisitions its owner goes on making: peers take the keys once its
// expiry + grace has passed, and the owner's next renewal finds them lost.
func TestAnAbandonedSessionEndsWhateverItsOwnerAcquires(t *testing.T) {
	s := tables.New(t)
	const ttl = 600 * time.Millisecond
	k := acquireFor(t, s, "k", "a", ttl)
	renewAll(t, s, "a", ttl, k)
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		acquireFor(t, s, "other", "a", ttl)
		res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: "k", Owner: "b", TTL: ttl, Grace: ttl / 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			if got, _ := renewAll(t, s, "a", ttl, k); got[0] {
				t.Fatal("a's term on k renewed after b took it")
			}
			return
		}
		time.Sleep(ttl / 8)
	}
	t.Fatalf("b never got k, whose session was renewed no more %v ago: %+v", 4*ttl, leaseOf(t, s, "k"))
}

// A version of this package from before sessions reads only a record's own
// expires_at: it must see a term on a session as live.
func TestATermOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := tables.New(t)
	k := acquireFor(t, s, "k", "a", time.Second)
	renewAll(t, s, "a", time.Second, k)
	var live bool
	if err := s.pool.QueryRow(context.Background(), `SELECT expires_at > clock_timestamp() + interval '50 years' FROM `+s.ident+` WHERE key = 'k'`).Scan(&live); err != nil || !live {
		t.Fatalf("a term on a session has an expires_at an older version would read as expired (%t, %v)", live, err)
	}
}

// A table made before sessions: a read-only Store lists it as it is, and a
// Store that opens it to write adds the column and the session table and
// moves its terms, which renew, onto a session.
func TestATableFromBeforeSessionsIsReadAndMigrated(t *testing.T) {
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
	ro, err := Open(ctx, testenv.Postgres.URL(t), Options{Table: s.table, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if l := leaseOf(t, ro, "k"); !l.Live || l.Owner != "a" || l.Epoch != 7 {
		t.Fatalf("read-only List of the old table: %+v", l)
	}
	w := tables.OpenTable(t, s.table, false)
	if got, slow := renewAll(t, w, "a", time.Minute, store.Term{Key: "k", Epoch: 7}); !got[0] || !slow {
		t.Fatalf("renewal of a term from before sessions: %v, slow %t; want renewed, term by term", got, slow)
	}
	if got, slow := renewAll(t, w, "a", time.Minute, store.Term{Key: "k", Epoch: 7}); !got[0] || slow {
		t.Fatalf("its next renewal: %v, slow %t; want renewed on the session alone", got, slow)
	}
}

// A version of this package from before sessions revokes a term (tenure
// release) by emptying its owner alone; the holder must still find
// it lost at its next renewal, and peers wait for the expiry it had.
func TestARevocationByAVersionWithoutSessionsReachesTheHolder(t *testing.T) {
	s := tables.New(t)
	const ttl = time.Minute
	k1, k2 := acquireFor(t, s, "k1", "a", ttl), acquireFor(t, s, "k2", "a", ttl)
	renewAll(t, s, "a", ttl, k1, k2)
	oldRevoke := `UPDATE ` + s.ident + ` AS l SET owner = '', epoch = l.epoch + 1, released = false, running = false,
	updated_at = clock_timestamp()
WHERE l.key = $1 AND NOT l.released AND l.owner <> '' AND l.expires_at > clock_timestamp()`
	if tag, err := s.pool.Exec(context.Background(), oldRevoke, "k1"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("the old revocation: %v %v", tag, err)
	}
	got, slow := renewAll(t, s, "a", ttl, k1, k2)
	if got[0] || !got[1] || !slow {
		t.Fatalf("renewal after an old version revoked k1: %v, slow %t; want [false true], term by term", got, slow)
	}
	if l := leaseOf(t, s, "k1"); l.Live || l.Owner != "" || l.TimeLeft <= 0 || l.TimeLeft > ttl {
		t.Fatalf("k1 after the old revocation: %+v; want owned by nobody, blocking for what was left of its term", l)
	}
}

// Prune deletes a session once it has been dead as long as it is asked and
// no record is on it, and never a live one.
func TestPruneDeletesDeadEmptySessions(t *testing.T) {
	s := tables.New(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	k := acquireFor(t, s, "k", "a", ttl)
	renewAll(t, s, "a", ttl, k)
	live := acquireFor(t, s, "live", "b", time.Minute)
	renewAll(t, s, "b", time.Minute, live)
	sessions := func() (n int) {
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.sess.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	time.Sleep(ttl + 100*time.Millisecond) // a's session is dead, its record still on it
	if _, err := s.Prune(ctx, "", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := sessions(); n != 1 {
		t.Fatalf("%d sessions after the prune; want b's live one alone", n)
	}
	if !leaseOf(t, s, "live").Live {
		t.Fatal("the prune ended b's live term")
	}
}
