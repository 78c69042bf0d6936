package etcd

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/clock"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// claim acquires key for owner "a" with maxElapsed, and reports the result
// and how many calls it took.
func claim(t *testing.T, s *Store, calls interface{ Load() int64 }, key string, maxElapsed time.Duration) (store.AcquireResult, int64) {
	t.Helper()
	from := calls.Load()
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: key, Owner: "a", TTL: time.Minute, Grace: time.Second, MaxElapsed: maxElapsed})
	if err != nil || !res.Acquired {
		t.Fatalf("acquiring %s = %+v, %v", key, res, err)
	}
	return res, calls.Load() - from
}

// An acquisition that may date its term back (MaxElapsed) puts it on a
// session found alive that recently as it is: one call, as etcd's mutex
// takes a key, and a term dated from the session's last keep-alive, which
// the server's lease outlives. One that may not, or whose session was
// found alive longer ago, sends a keep-alive with its write, as before.
func TestAClaimOnASessionFoundAliveLatelyIsDatedBackAndSendsNoKeepAlive(t *testing.T) {
	s, calls := countingStore(t)
	testenv.MustAcquire(t, s, "first", "a", time.Minute, time.Second) // grants a's session

	began := time.Now()
	res, n := claim(t, s, calls, "dated", 30*time.Second)
	if n != 1 {
		t.Errorf("a claim on a session found alive lately took %d calls, want 1 (the transaction)", n)
	}
	if res.Elapsed <= 0 || res.Elapsed > 30*time.Second {
		t.Errorf("Elapsed %v, want in (0, 30s]: the time since the grant was sent", res.Elapsed)
	}
	sess := s.lookupSession("a", 60, 1)
	left, err := s.client.TimeToLive(testenv.Context(t), sess.lease)
	if err != nil {
		t.Fatal(err)
	}
	// The lease outlives the term's promise: began - Elapsed + ttl + grace,
	// less a second of the server's rounding down.
	if promised := time.Minute + time.Second - res.Elapsed - time.Since(began) - time.Second; time.Duration(left.TTL)*time.Second < promised {
		t.Errorf("the session has %ds left, less than the %v the dated term was promised", left.TTL, promised)
	}

	if res, n := claim(t, s, calls, "undated", 0); n != 2 || res.Elapsed != 0 {
		t.Errorf("a claim without MaxElapsed took %d calls, Elapsed %v; want 2 (transaction, keep-alive), 0", n, res.Elapsed)
	}
	// That keep-alive found the session alive: the next claim is dated
	// from it, a moment ago.
	if res, n := claim(t, s, calls, "after", 30*time.Second); n != 1 || res.Elapsed > time.Since(began) {
		t.Errorf("a claim after a keep-alive took %d calls, Elapsed %v; want 1, dated from that keep-alive", n, res.Elapsed)
	}
	time.Sleep(2 * time.Millisecond)
	if res, n := claim(t, s, calls, "stale", time.Millisecond); n != 2 || res.Elapsed != 0 {
		t.Errorf("a claim on a session found alive longer ago than its MaxElapsed took %d calls, Elapsed %v; want 2, 0", n, res.Elapsed)
	}
}

// A peer that heard of a release dates its term back too: one write.
func TestAPeerThatHeardOfAReleaseDatesItsTermBack(t *testing.T) {
	peer, calls := countingStore(t)
	holder := anotherStore(t, peer)
	events, err := peer.Watch(testenv.Context(t), "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.MustAcquire(t, peer, "warm", "a", time.Minute, time.Second) // a's session exists
	e := testenv.MustAcquire(t, holder, "job", "b", time.Minute, time.Second)
	testenv.Release(t, holder, "b", store.Term{Key: "job", Epoch: e})
	awaitRelease(t, events, "job")
	res, n := claim(t, peer, calls, "job", 30*time.Second)
	if n != 1 || res.Elapsed <= 0 || res.Epoch <= e {
		t.Errorf("acquiring a key heard released: %d calls, %+v; want 1 call, a dated term above epoch %d", n, res, e)
	}
}

// A key with a record (here one released) is read by the claim's
// transaction, and the write that follows goes on the session found alive
// lately as it is: two calls, no keep-alive between them, and a dated
// term.
func TestAClaimOfAKeyWithARecordIsDatedBackToo(t *testing.T) {
	s, calls := countingStore(t)
	e := testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Second)
	testenv.Release(t, s, "a", store.Term{Key: "job", Epoch: e})
	res, n := claim(t, s, calls, "job", 30*time.Second)
	if n != 2 || res.Elapsed <= 0 || res.Epoch <= e {
		t.Errorf("claiming a released key: %d calls, %+v; want 2 (the transaction that read it, the write), a dated term above %d", n, res, e)
	}
}

// The session's last keep-alive is timed on a clock that counts the time
// the host spends suspended, as the server's lease clock does: after a
// suspend longer than MaxElapsed, a claim keeps the session alive and is
// not dated, though the process's own clock saw no time pass. So is a
// claim whose write took so long that the keep-alive it is dated from is
// older than MaxElapsed when it returns (its first renewal may come a
// period after that).
func TestNeitherASuspendNorASlowWriteLetsAClaimBeDatedPastMaxElapsed(t *testing.T) {
	s, calls := countingStore(t)
	testenv.MustAcquire(t, s, "first", "a", time.Minute, time.Second)
	var slept atomic.Int64
	s.now = func() time.Time { return clock.Now().Add(time.Duration(slept.Load())) }
	slept.Store(int64(20 * time.Second)) // the host was suspended for 20s
	if res, n := claim(t, s, calls, "after-a-suspend", 10*time.Second); n != 2 || res.Elapsed != 0 {
		t.Errorf("a claim after a suspend past MaxElapsed: %d calls, Elapsed %v; want 2 (transaction, keep-alive), 0", n, res.Elapsed)
	}

	// The write "takes" 20s: every reading after the claim's start is 20s
	// later.
	var readings atomic.Int64
	s.now = func() time.Time {
		if readings.Add(1) > 1 {
			return clock.Now().Add(40 * time.Second)
		}
		return clock.Now().Add(20 * time.Second)
	}
	if res, n := claim(t, s, calls, "slow", 10*time.Second); n != 2 || res.Elapsed != 0 {
		t.Errorf("a claim whose write ended past MaxElapsed: %d calls, Elapsed %v; want 2 (transaction, then a keep-alive), 0", n, res.Elapsed)
	}
}
