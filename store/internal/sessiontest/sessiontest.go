// Package sessiontest is the suite every lease store with sessions runs
// (store/postgres, store/sqlite, store/mysql, store/redis; see
// store/internal/sessionbook): the behaviours that make a renewal one
// write however many keys a process holds, and that keep each term its
// own end. A store's test calls [Run] with a [Harness], and [RunRaces]
// where another transaction can lock its rows; its own tests (migration,
// older versions, races of its own) use the helpers here.
//
// The suite reads the store's clock through real time (it sleeps): terms
// of a second or less, so it runs in a few seconds.
package sessiontest

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Store is a lease store with sessions, revocation and pruning.
type Store interface {
	store.Store
	store.Revoker
	store.Pruner
}

// Harness tells the suite how to drive one backend.
type Harness struct {
	// Open returns a Store on a new, empty table, closed when t ends.
	Open func(t *testing.T) Store
	// Another returns a second Store on s's table: an owner's other
	// handle, whose changes s does not hear of.
	Another func(t *testing.T, s Store) Store
	// SlowRenewals counts the store's renewals that went term by term. It
	// is the package's counter, so the suite runs its tests one at a time.
	SlowRenewals func() int64
	// SessionOf is the session key's record is on (0: its own record).
	SessionOf func(t *testing.T, s Store, key string) int64
	// Sessions counts the rows of s's session table.
	Sessions func(t *testing.T, s Store) int
}

// Renew renews terms of owner with ttl, with their runners running, and
// reports what each got and whether the renewal went term by term.
func (h Harness) Renew(t *testing.T, s Store, owner string, ttl time.Duration, terms ...store.Term) (got []bool, slow bool) {
	t.Helper()
	items := make([]store.RenewItem, len(terms))
	for i, tm := range terms {
		items[i] = store.RenewItem{Key: tm.Key, Epoch: tm.Epoch, Running: true}
	}
	before := h.SlowRenewals()
	got, err := s.Renew(context.Background(), owner, ttl, items)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	return got, h.SlowRenewals() != before
}

// Acquire acquires key for owner with ttl (grace ttl/4) or fails the test.
func Acquire(t *testing.T, s store.Store, key, owner string, ttl time.Duration) store.Term {
	t.Helper()
	res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: ttl / 4, Running: true})
	if err != nil || !res.Acquired {
		t.Fatalf("%s could not acquire %q: %+v %v", owner, key, res.Holder, err)
	}
	return store.Term{Key: key, Epoch: res.Epoch}
}

// LeaseOf lists key's lease or fails the test.
func LeaseOf(t *testing.T, s store.Store, key string) store.Lease {
	t.Helper()
	ls, err := s.List(context.Background(), key)
	if err != nil || len(ls) == 0 || ls[0].Key != key {
		t.Fatalf("List(%q): %v %v", key, ls, err)
	}
	return ls[0]
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("ARenewalOfTheSessionsTermsWritesTheSessionAlone", h.renewalWritesTheSessionAlone)
	t.Run("ATermNoRenewalListsEndsOnItsOwn", h.unlistedTermEnds)
	t.Run("AnAbandonedSessionEndsWhateverItsOwnerAcquires", h.abandonedSessionEnds)
	t.Run("AReleaseOfSeveralTermsLeavesNoneOnTheSession", h.releaseOfSeveral)
	t.Run("PruneDeletesDeadEmptySessions", h.pruneDeletesDeadSessions)
}

// Terms acquired go on the session at their first renewal, which writes
// the session and them alone; the renewals after that write the session
// alone. Anything changed behind the Store's back sends a renewal term by
// term, which answers per term, and the one after it is fast again.
func (h Harness) renewalWritesTheSessionAlone(t *testing.T) {
	s := h.Open(t)
	const ttl = time.Minute
	k1, k2, k3 := Acquire(t, s, "k1", "a", ttl), Acquire(t, s, "k2", "a", ttl), Acquire(t, s, "k3", "a", ttl)
	for round := range 2 {
		if got, slow := h.Renew(t, s, "a", ttl, k1, k2, k3); slow || !got[0] || !got[1] || !got[2] {
			t.Fatalf("renewal %d: %v, slow %t; want all renewed, on the session alone", round, got, slow)
		}
	}
	if h.SessionOf(t, s, "k2") == 0 {
		t.Fatal("k2 is not on a session after its renewals")
	}
	if ok, err := s.Revoke(context.Background(), "k2"); err != nil || !ok {
		t.Fatalf("Revoke: %t %v", ok, err)
	}
	got, slow := h.Renew(t, s, "a", ttl, k1, k2, k3)
	if !slow || !got[0] || got[1] || !got[2] {
		t.Fatalf("renewal after k2 was revoked: %v, slow %t; want [true false true], term by term", got, slow)
	}
	if got, slow := h.Renew(t, s, "a", ttl, k1, k3); slow || !got[0] || !got[1] {
		t.Fatalf("renewal of what is left: %v, slow %t; want all renewed, on the session alone", got, slow)
	}
	// Another Store on the table releases a's k3, named twice.
	if err := h.Another(t, s).Release(context.Background(), "a", []store.Term{k3, k3}); err != nil {
		t.Fatal(err)
	}
	got, slow = h.Renew(t, s, "a", ttl, k1, k3)
	if !slow || !got[0] || got[1] {
		t.Fatalf("renewal after another handle released k3: %v, slow %t; want [true false], term by term", got, slow)
	}
}

// A term no renewal lists any more leaves the session with the expiry the
// session had then, and ends on its own while the session lives on; and
// acquisitions, which start terms on their own records, never extend it.
func (h Harness) unlistedTermEnds(t *testing.T) {
	s := h.Open(t)
	const ttl = 900 * time.Millisecond
	kept, dropped := Acquire(t, s, "kept", "a", ttl), Acquire(t, s, "dropped", "a", ttl)
	h.Renew(t, s, "a", ttl, kept, dropped)
	if got, slow := h.Renew(t, s, "a", ttl, kept); !slow || !got[0] {
		t.Fatalf("renewal of kept alone: %v, slow %t; want renewed, term by term", got, slow)
	}
	// Off the session its owner renews: on its own record (PostgreSQL,
	// SQLite) or left on one renewed no more (Redis).
	l, on, renewed := LeaseOf(t, s, "dropped"), h.SessionOf(t, s, "dropped"), h.SessionOf(t, s, "kept")
	if !l.Live || l.TimeLeft > ttl || on == renewed {
		t.Fatalf("dropped right after the renewal that left it out: %+v on session %d (kept's: %d); want live, off kept's session", l, on, renewed)
	}
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) && LeaseOf(t, s, "dropped").Live {
		if got, _ := h.Renew(t, s, "a", ttl, kept); !got[0] {
			t.Fatalf("kept not renewed: %v", got)
		}
		Acquire(t, s, "busy", "a", ttl) // acquisitions go on meanwhile
		time.Sleep(ttl / 6)
	}
	if l := LeaseOf(t, s, "dropped"); l.Live {
		t.Fatalf("dropped still live %v after its last renewal, the session renewed throughout: %+v", 3*ttl, l)
	}
	if !LeaseOf(t, s, "kept").Live {
		t.Fatal("kept ended with dropped")
	}
}

// A session that is renewed no more ends with every term on it, however
// many acquisitions its owner goes on making: peers take the keys once its
// expiry + grace has passed, and the owner's next renewal finds them lost.
func (h Harness) abandonedSessionEnds(t *testing.T) {
	s := h.Open(t)
	const ttl = 600 * time.Millisecond
	k := Acquire(t, s, "k", "a", ttl)
	h.Renew(t, s, "a", ttl, k)
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		Acquire(t, s, "other", "a", ttl)
		res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: "k", Owner: "b", TTL: ttl, Grace: ttl / 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			if got, _ := h.Renew(t, s, "a", ttl, k); got[0] {
				t.Fatal("a's term on k renewed after b took it")
			}
			return
		}
		time.Sleep(ttl / 8)
	}
	t.Fatalf("b never got k, whose session was renewed no more %v ago: %+v", 4*ttl, LeaseOf(t, s, "k"))
}

// One release of several terms moves their session one version: none of
// them may stay in what the Store knows, or a renewal listing one is
// answered true from the session alone though a peer has taken it. The
// session's other terms renew on it alone after that.
func (h Harness) releaseOfSeveral(t *testing.T) {
	for _, listed := range []string{"k1", "k2"} {
		s := h.Open(t)
		const ttl = time.Minute
		k1, k2, k3 := Acquire(t, s, "k1", "a", ttl), Acquire(t, s, "k2", "a", ttl), Acquire(t, s, "k3", "a", ttl)
		h.Renew(t, s, "a", ttl, k1, k2, k3)
		if err := s.Release(context.Background(), "a", []store.Term{k1, k2}); err != nil {
			t.Fatal(err)
		}
		Acquire(t, s, listed, "b", ttl) // a peer takes a released key at once
		gone := map[string]store.Term{"k1": k1, "k2": k2}[listed]
		if got, _ := h.Renew(t, s, "a", ttl, gone, k3); got[0] || !got[1] {
			t.Fatalf("renewal of released %s and of k3: %v; want [false true] (%s is b's: %+v)", listed, got, listed, LeaseOf(t, s, listed))
		}
		if got, slow := h.Renew(t, s, "a", ttl, k3); !got[0] || slow {
			t.Fatalf("renewal of k3 alone: %v, slow %t; want renewed on the session alone", got, slow)
		}
	}
}

// Prune deletes a session once it has been dead as long as it is asked and
// no record is on it, and never a live one.
func (h Harness) pruneDeletesDeadSessions(t *testing.T) {
	s := h.Open(t)
	const ttl = 300 * time.Millisecond
	k := Acquire(t, s, "k", "a", ttl)
	h.Renew(t, s, "a", ttl, k)
	live := Acquire(t, s, "live", "b", time.Minute)
	h.Renew(t, s, "b", time.Minute, live)
	time.Sleep(ttl + 100*time.Millisecond) // a's session is dead, its record still on it
	if _, err := s.Prune(context.Background(), "", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := h.Sessions(t, s); n != 1 {
		t.Fatalf("%d sessions after the prune; want b's live one alone", n)
	}
	if !LeaseOf(t, s, "live").Live {
		t.Fatal("the prune ended b's live term")
	}
}
