package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

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
	res := acquire(t, s, key, owner, ttl, ttl/4)
	if !res.Acquired {
		t.Fatalf("%s could not acquire %q: %+v", owner, key, res.Holder)
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
	if err := s.db.QueryRow(`SELECT session FROM `+s.table+` WHERE key = ?`, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Terms acquired go on the session at their first renewal, which writes
// the session and them alone; the renewals after that write the session
// alone. Anything changed behind the Store's back sends a renewal term by
// term, which answers per term, and the one after it is fast again.
func TestARenewalOfTheSessionsTermsWritesTheSessionAlone(t *testing.T) {
	s := openTemp(t, Options{})
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
	// Another Store of the file releases a's k3 (an owner's two handles).
	other := openAt(t, s.path, Options{})
	if err := other.Release(context.Background(), "a", []store.Term{k3, k3}); err != nil {
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
	s := openTemp(t, Options{})
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
	for time.Now().Before(deadline) && leaseOf(t, s, "dropped").Live {
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
	s := openTemp(t, Options{})
	const ttl = 600 * time.Millisecond
	k := acquireFor(t, s, "k", "a", ttl)
	renewAll(t, s, "a", ttl, k)
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		acquireFor(t, s, "other", "a", ttl)
		if res := acquire(t, s, "k", "b", ttl, ttl/4); res.Acquired {
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
// expires_at: it must see a term on a session as live, and never take it.
func TestATermOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := openTemp(t, Options{})
	k := acquireFor(t, s, "k", "a", time.Second)
	renewAll(t, s, "a", time.Second, k)
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
	if l := leaseOf(t, ro, "k"); !l.Live || l.Owner != "a" || l.Epoch != epoch {
		t.Fatalf("read-only List of the old table: %+v", l)
	}
	s := openAt(t, path, Options{})
	if got, slow := renewAll(t, s, "a", time.Minute, store.Term{Key: "k", Epoch: epoch}); !got[0] || !slow {
		t.Fatalf("renewal of a term from before sessions: %v, slow %t; want renewed, term by term", got, slow)
	}
	// The read-only Store follows the migration: k, now on a session,
	// has about a minute left, not a century.
	if l := leaseOf(t, ro, "k"); !l.Live || l.TimeLeft > time.Minute {
		t.Fatalf("read-only List after the migration: %+v", l)
	}
	if got, slow := renewAll(t, s, "a", time.Minute, store.Term{Key: "k", Epoch: epoch}); !got[0] || slow {
		t.Fatalf("its next renewal: %v, slow %t; want renewed on the session alone", got, slow)
	}
}

// A version of this package from before sessions revokes a term (tenure
// release) by emptying its owner alone; the holder must still find
// it lost at its next renewal, and peers wait for the expiry it had.
func TestARevocationByAVersionWithoutSessionsReachesTheHolder(t *testing.T) {
	s := openTemp(t, Options{})
	const ttl = time.Minute
	k1, k2 := acquireFor(t, s, "k1", "a", ttl), acquireFor(t, s, "k2", "a", ttl)
	renewAll(t, s, "a", ttl, k1, k2)
	const oldRevoke = `UPDATE %s SET owner = '', epoch = epoch + 1, released = 0, running = 0, updated_at = ` + nowUS + `
WHERE key = ?1 AND owner <> '' AND released = 0 AND expires_at > ` + nowUS + ` RETURNING epoch`
	var epoch int64
	if err := s.db.QueryRow(fmt.Sprintf(oldRevoke, s.table), "k1").Scan(&epoch); err != nil {
		t.Fatal(err)
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
	s := openTemp(t, Options{})
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	k := acquireFor(t, s, "k", "a", ttl)
	renewAll(t, s, "a", ttl, k)
	live := acquireFor(t, s, "live", "b", time.Minute)
	renewAll(t, s, "b", time.Minute, live)
	time.Sleep(ttl + 100*time.Millisecond) // a's session is dead, its record still on it
	if _, err := s.Prune(ctx, "", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM ` + sessionTable(s.table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d sessions after the prune; want b's live one alone", n)
	}
	if !leaseOf(t, s, "live").Live {
		t.Fatal("the prune ended b's live term")
	}
}

// One release of several terms moves their session one version: none of
// them may stay in what the Store knows, or a renewal listing one is
// answered true from the session alone though a peer has taken it.
func TestAReleaseOfSeveralTermsLeavesNoneOnTheSession(t *testing.T) {
	for _, listed := range []string{"k1", "k2"} {
		s := openTemp(t, Options{})
		const ttl = time.Minute
		k1, k2, k3 := acquireFor(t, s, "k1", "a", ttl), acquireFor(t, s, "k2", "a", ttl), acquireFor(t, s, "k3", "a", ttl)
		renewAll(t, s, "a", ttl, k1, k2, k3)
		if err := s.Release(context.Background(), "a", []store.Term{k1, k2}); err != nil {
			t.Fatal(err)
		}
		acquireFor(t, s, listed, "b", ttl) // a peer takes a released key at once
		gone := map[string]store.Term{"k1": k1, "k2": k2}[listed]
		if got, _ := renewAll(t, s, "a", ttl, gone, k3); got[0] || !got[1] {
			t.Fatalf("renewal of released %s and of k3: %v; want [false true]", listed, got)
		}
	}
}
