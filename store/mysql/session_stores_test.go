package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// Two Stores of one owner and TTL: a term-by-term renewal of s1 that
// lists t, on s2's live session, stamps its own session's expiry at its
// first record and then waits for a later record's lock, while s2's
// steady renewal promises t more than that. t must keep s2's promise: s1
// leaves it on s2's session (and answers it lost) rather than move it
// onto its own with the earlier expiry, which let a peer in before s2's
// promise ended.
func TestATermOnAnotherStoresSessionKeepsWhatThatStorePromised(t *testing.T) {
	s1 := tables.New(t)
	s2 := tables.OpenTable(t, s1.table, false)
	ctx := testenv.Context(t)
	const ttl = 3 * time.Second
	const grace = 100 * time.Millisecond
	a := sessiontest.Acquire(t, s1, "a", "o", ttl)
	m := sessiontest.Acquire(t, s1, "m", "o", ttl)
	sessions.Renew(t, s1, "o", ttl, a, m) // a, m on s1's session
	tt := sessiontest.Acquire(t, s2, "t", "o", ttl)
	sessions.Renew(t, s2, "o", ttl, tt) // t on s2's session
	if sessions.SessionOf(t, s1, "a") == sessions.SessionOf(t, s2, "t") {
		t.Fatal("one session for both Stores")
	}

	release := holdRow(t, s1, "SELECT 1 FROM `"+s1.table+"` WHERE lease_key = ? FOR UPDATE", []byte("m"))
	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// t is unknown to s1's Book: term by term.
		_, err := s1.Renew(rctx, "o", ttl, []store.RenewItem{{Key: "a", Epoch: a.Epoch}, {Key: "m", Epoch: m.Epoch}, {Key: "t", Epoch: tt.Epoch}})
		done <- err
	}()
	waitForLockWaiters(t, s1, 1) // s1's renewTerms holds its session and a, waits for m
	time.Sleep(ttl / 2)
	promised := time.Now().Add(ttl) // s2's promise: its call's start + ttl
	if got, slow := sessions.Renew(t, s2, "o", ttl, tt); !got[0] || slow {
		t.Fatalf("s2's renewal of t: %v slow %t", got, slow)
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("s1's renewal did not return")
	}
	l := sessiontest.LeaseOf(t, s1, "t")
	left := time.Until(promised)
	t.Logf("t after s1's move: on session %d, time left %v; s2 promised %v more", sessions.SessionOf(t, s1, "t"), l.TimeLeft, left)
	// A peer once the store's expiry + grace passed.
	time.Sleep(l.TimeLeft + grace + 50*time.Millisecond)
	res, err := s1.Acquire(ctx, store.AcquireRequest{Key: "t", Owner: "peer", TTL: ttl, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired && time.Now().Before(promised) {
		t.Fatalf("TWO HOLDERS: peer acquired t at epoch %d %v before the expiry s2's renewal promised", res.Epoch, time.Until(promised))
	}
}
