package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// renewAll renews terms of owner with ttl and reports what each got and
// whether the renewal took the slow path. Tests using it do not run in
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
	res := acquire(t, s, key, owner, ttl, ttl/2)
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

// A renewal of exactly the terms the Store put on its session writes the
// session alone; anything changed behind its back sends it the slow way,
// which answers per term, and the renewal after that is fast again.
func TestARenewalOfTheSessionsTermsWritesTheSessionAlone(t *testing.T) {
	s := openTemp(t, Options{})
	const ttl = time.Minute
	k1, k2, k3 := acquireFor(t, s, "k1", "a", ttl), acquireFor(t, s, "k2", "a", ttl), acquireFor(t, s, "k3", "a", ttl)
	if got, slow := renewAll(t, s, "a", ttl, k1, k2, k3); slow || !got[0] || !got[1] || !got[2] {
		t.Fatalf("first renewal: %v, slow %t; want all renewed, fast", got, slow)
	}
	if ok, err := s.Revoke(context.Background(), "k2"); err != nil || !ok {
		t.Fatalf("Revoke: %t %v", ok, err)
	}
	got, slow := renewAll(t, s, "a", ttl, k1, k2, k3)
	if !slow || !got[0] || got[1] || !got[2] {
		t.Fatalf("renewal after k2 was revoked: %v, slow %t; want [true false true], slow", got, slow)
	}
	if got, slow := renewAll(t, s, "a", ttl, k1, k3); slow || !got[0] || !got[1] {
		t.Fatalf("renewal of what is left: %v, slow %t; want all renewed, fast", got, slow)
	}
	// Another Store of the file releases a's k3 (an owner's two handles).
	other := openAt(t, s.path, Options{})
	if err := other.Release(context.Background(), "a", []store.Term{k3}); err != nil {
		t.Fatal(err)
	}
	got, slow = renewAll(t, s, "a", ttl, k1, k3)
	if !slow || !got[0] || got[1] {
		t.Fatalf("renewal after another handle released k3: %v, slow %t; want [true false], slow", got, slow)
	}
}

// A term no renewal lists any more leaves the session with the expiry the
// session had then, and ends on its own while the session lives on; one
// acquired since the session's last renewal stays on it, since its
// holder may not have heard of it when it listed its terms.
func TestATermNoRenewalListsEndsOnItsOwn(t *testing.T) {
	s := openTemp(t, Options{})
	const ttl = 900 * time.Millisecond
	kept, dropped := acquireFor(t, s, "kept", "a", ttl), acquireFor(t, s, "dropped", "a", ttl)
	renewAll(t, s, "a", ttl, kept, dropped)
	late := acquireFor(t, s, "late", "a", ttl)
	if got, slow := renewAll(t, s, "a", ttl, kept); !slow || !got[0] {
		t.Fatalf("renewal of kept alone: %v, slow %t; want renewed, slow", got, slow)
	}
	var session int64
	if err := s.db.QueryRow(`SELECT session FROM ` + s.table + ` WHERE key = 'late'`).Scan(&session); err != nil || session == 0 {
		t.Fatalf("late, acquired after the last renewal, left the session (%d, %v)", session, err)
	}
	if l := leaseOf(t, s, "dropped"); !l.Live || l.TimeLeft > ttl {
		t.Fatalf("dropped right after the renewal that left it out: %+v; want live, no more than a ttl left", l)
	}
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) && leaseOf(t, s, "dropped").Live {
		if got, _ := renewAll(t, s, "a", ttl, kept, late); !got[0] || !got[1] {
			t.Fatalf("kept and late not renewed: %v", got)
		}
		time.Sleep(ttl / 6)
	}
	if l := leaseOf(t, s, "dropped"); l.Live {
		t.Fatalf("dropped still live %v after its last renewal, its session renewed throughout: %+v", 3*ttl, l)
	}
	if !leaseOf(t, s, "kept").Live || !leaseOf(t, s, "late").Live {
		t.Fatal("kept or late ended with dropped")
	}
}

// A version of this package from before sessions reads only a record's own
// expires_at: it must see a term on a session as live, and never take it.
func TestATermOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := openTemp(t, Options{})
	acquireFor(t, s, "k", "a", time.Second)
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
		t.Fatalf("renewal of a term from before sessions: %v, slow %t; want renewed, slow", got, slow)
	}
	if got, slow := renewAll(t, s, "a", time.Minute, store.Term{Key: "k", Epoch: epoch}); !got[0] || slow {
		t.Fatalf("its next renewal: %v, slow %t; want renewed on the session alone", got, slow)
	}
}

// A term acquired since the session's last renewal may be missing from the
// next renewal's list (its acquisition was answered after the list was
// made): that renewal still writes the session alone. The renewal after it
// must list it, or take it off.
func TestARenewalMayMissATermAcquiredSinceTheLast(t *testing.T) {
	s := openTemp(t, Options{})
	const ttl = time.Minute
	k1 := acquireFor(t, s, "k1", "a", ttl)
	renewAll(t, s, "a", ttl, k1)
	acquireFor(t, s, "k2", "a", ttl)
	// SQLite's clock counts milliseconds: let the next renewal's come
	// after k2's acquisition, as it does but for the resolution.
	time.Sleep(2 * time.Millisecond)
	if got, slow := renewAll(t, s, "a", ttl, k1); slow || !got[0] {
		t.Fatalf("renewal without k2, acquired since the last: %v, slow %t; want renewed, fast", got, slow)
	}
	if got, slow := renewAll(t, s, "a", ttl, k1); !slow || !got[0] {
		t.Fatalf("a second renewal without k2: %v, slow %t; want renewed, slow", got, slow)
	}
	var session int64
	if err := s.db.QueryRow(`SELECT session FROM ` + s.table + ` WHERE key = 'k2'`).Scan(&session); err != nil || session != 0 {
		t.Fatalf("k2, left out twice, is still on session %d (%v)", session, err)
	}
}
