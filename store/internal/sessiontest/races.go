package sessiontest

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Locks is what [RunRaces] needs beyond a [Harness]: locks held from
// another transaction, as a peer's statement holds them for a moment,
// and a way to see statements wait for them.
type Locks struct {
	// HoldRecord locks key's record until release is called.
	HoldRecord func(t *testing.T, s Store, key string) (release func())
	// HoldSession locks session id's row until release is called.
	HoldSession func(t *testing.T, s Store, id int64) (release func())
	// WaitForLockWaiters returns once n statements on s's tables wait
	// for a row lock.
	WaitForLockWaiters func(t *testing.T, s Store, n int)
}

// RunRaces runs the races between a store's statements that row locks
// make deterministic, for a store whose records and sessions another
// transaction can lock.
func RunRaces(t *testing.T, h Harness, l Locks) {
	t.Run("ATermPutOnDuringATermByTermRenewalIsSeenByIt", func(t *testing.T) { h.termPutOnIsSeen(t, l) })
	t.Run("ARevocationRacingARenewalThatMovesTheTermRevokesIt", func(t *testing.T) { h.revocationRacingARenewal(t, l) })
	t.Run("ARenewalThatWaitsForItsSessionReadsTheClockAfterTheWait", func(t *testing.T) { h.renewalWaitsForItsSession(t, l) })
}

// renewAsync renews items of owner with ttl in a goroutine of its own and
// hands back its error.
func renewAsync(s Store, owner string, ttl time.Duration, items ...store.RenewItem) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Renew(context.Background(), owner, ttl, items)
		done <- err
	}()
	return done
}

// A renewal that goes term by term while another puts a term on the
// session must see that term (it reads the session's terms once it holds
// the session), or the term would live as long as the session with nobody
// listing it.
func (h Harness) termPutOnIsSeen(t *testing.T, l Locks) {
	s := h.Open(t)
	const ttl = time.Second
	a := Acquire(t, s, "a", "o", ttl)
	h.Renew(t, s, "o", ttl, a)
	j := Acquire(t, s, "j", "o", ttl) // on its own record until a renewal lists it

	release := l.HoldRecord(t, s, "j")
	// Puts j on: holds the session, waits for j's record.
	fast := renewAsync(s, "o", ttl, store.RenewItem{Key: "a", Epoch: a.Epoch}, store.RenewItem{Key: "j", Epoch: j.Epoch})
	l.WaitForLockWaiters(t, s, 1)
	// Lists a term it never acquired: term by term, waits for the session.
	slow := renewAsync(s, "o", ttl, store.RenewItem{Key: "a", Epoch: a.Epoch}, store.RenewItem{Key: "zz", Epoch: 1})
	l.WaitForLockWaiters(t, s, 2)
	release()
	for _, done := range []<-chan error{fast, slow} {
		if err := within(t, done); err != nil {
			t.Fatal(err)
		}
	}
	// j's holder never lists it again; a is renewed on.
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) && LeaseOf(t, s, "j").Live {
		if got, _ := h.Renew(t, s, "o", ttl, a); !got[0] {
			t.Fatal("a lost")
		}
		time.Sleep(ttl / 5)
	}
	if lease := LeaseOf(t, s, "j"); lease.Live {
		t.Fatalf("j still live %v after its last listing: %+v", 4*ttl, lease)
	}
}

// A revocation racing a renewal that puts the term on a session still
// revokes it: Revoke answers false only for a key with no live term.
func (h Harness) revocationRacingARenewal(t *testing.T, l Locks) {
	s := h.Open(t)
	const ttl = time.Minute
	a := Acquire(t, s, "a", "o", ttl)
	h.Renew(t, s, "o", ttl, a)
	j := Acquire(t, s, "j", "o", ttl)
	release := l.HoldRecord(t, s, "j")
	renewed := renewAsync(s, "o", ttl, store.RenewItem{Key: "a", Epoch: a.Epoch}, store.RenewItem{Key: "j", Epoch: j.Epoch})
	l.WaitForLockWaiters(t, s, 1)
	type answer struct {
		ok  bool
		err error
	}
	revoked := make(chan answer, 1)
	go func() {
		ok, err := s.Revoke(context.Background(), "j")
		revoked <- answer{ok, err}
	}()
	l.WaitForLockWaiters(t, s, 2)
	release()
	if err := within(t, renewed); err != nil {
		t.Fatal(err)
	}
	if r := within(t, revoked); r.err != nil || !r.ok {
		t.Fatalf("Revoke of live j = %t, %v; want revoked (j: %+v)", r.ok, r.err, LeaseOf(t, s, "j"))
	}
	if lease := LeaseOf(t, s, "j"); lease.Owner != "" || lease.Live {
		t.Fatalf("j after the revocation: %+v", lease)
	}
}

// A renewal of the session alone that waits behind a transaction holding
// the session row (a peer's acquisition attempt locks it) reads the clock
// once it holds it: a session that expired meanwhile stays dead, and its
// term is lost, not renewed with a stamp from before the wait.
func (h Harness) renewalWaitsForItsSession(t *testing.T, l Locks) {
	s := h.Open(t)
	const ttl = 400 * time.Millisecond
	k := Acquire(t, s, "k", "a", ttl)
	h.Renew(t, s, "a", ttl, k) // k goes on the session
	release := l.HoldSession(t, s, h.SessionOf(t, s, "k"))
	got := make(chan []bool, 1)
	go func() {
		ok, err := s.Renew(context.Background(), "a", ttl, []store.RenewItem{{Key: "k", Epoch: k.Epoch}})
		if err != nil {
			t.Error(err)
		}
		got <- ok
	}()
	l.WaitForLockWaiters(t, s, 1)
	time.Sleep(ttl + 100*time.Millisecond) // the session expires on the server's clock
	release()
	if ok := <-got; len(ok) != 1 || ok[0] {
		t.Fatalf("renewal that waited past the session's expiry = %v; want lost", ok)
	}
	if lease := LeaseOf(t, s, "k"); lease.Live {
		t.Fatalf("k live again after its session expired: %+v", lease)
	}
}

// within receives from ch, or fails the test when nothing comes in 30s: a
// call held up for good must not hang the suite.
func within[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("no answer in 30s")
		var zero T
		return zero
	}
}
