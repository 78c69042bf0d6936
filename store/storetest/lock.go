package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// The tests in this file hold a write lock on a key's record through
// Harness.LockKey, as a peer's transaction would, and skip without one.

// whileLocked holds key's lock, starts call, lets wait pass on the store's
// clock and checks that call is still blocked; then it unlocks, waits for
// call to return and reports when the lock was let go.
func (c *suite) whileLocked(t *testing.T, s store.Store, key string, wait time.Duration, call func(ctx context.Context)) (unlocked time.Time) {
	t.Helper()
	var once sync.Once
	unlock := c.h.LockKey(t, s, key)
	release := func() { once.Do(unlock) }
	t.Cleanup(release)

	done := make(chan struct{})
	ctx := c.ctx(t)
	go func() {
		defer close(done)
		call(ctx)
	}()
	c.advance(t, s, wait)
	if c.h.InstantAdvance {
		// An injected clock moves at once: give a call that does not wait
		// the real time to return, or this check would prove nothing.
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-done:
		release()
		t.Fatalf("a call on locked %q returned while the lock was held; want it to wait (or the test proves nothing)", key)
	default:
	}
	unlocked = time.Now()
	release()
	select {
	case <-done:
	case <-time.After(c.callTimeout):
		t.Fatalf("a call on %q was still blocked %v after the unlock", key, c.callTimeout)
	}
	return unlocked
}

// renewWhileLocked renews a's term e of key while key is locked, letting
// wait pass before the unlock.
func (c *suite) renewWhileLocked(t *testing.T, s store.Store, key string, e int64, wait time.Duration) (ok []bool, unlocked time.Time, err error) {
	t.Helper()
	unlocked = c.whileLocked(t, s, key, wait, func(ctx context.Context) {
		ok, err = s.Renew(ctx, "a", c.ttl, []store.RenewItem{{Key: key, Epoch: e}})
	})
	return ok, unlocked, err
}

func (c *suite) needLockKey(t *testing.T) {
	if c.h.LockKey == nil {
		t.Skip("Harness.LockKey is nil: the store has no row locks to wait behind")
	}
}

// testRenewalBlockedByALockStampsExpiryAfterTheWait pins rule 3: expiry is
// store-now + ttl when the statement runs, not when its transaction began
// (Postgres now() is the transaction start; clock_timestamp() is right).
func (c *suite) testRenewalBlockedByALockStampsExpiryAfterTheWait(t *testing.T) {
	c.needLockKey(t)
	s := c.fresh(t)
	const key = "locked"
	e := c.mustAcquire(t, s, key, "a")
	ok, unlocked, err := c.renewWhileLocked(t, s, key, e, 2*c.unit)
	if err != nil || len(ok) != 1 || !ok[0] {
		t.Fatalf("renewal of %q (owner a, epoch %d) after the unlock = %v, %v; want renewed", key, e, ok, err)
	}
	c.checkTimeLeft(t, "List after the renewal that waited 2 units for the lock", c.lease(t, s, key).TimeLeft, c.ttl, unlocked, 0)
}

// testRenewalThatWaitsPastTheExpiryIsLost pins that liveness, like the
// expiry, is judged when the renewal runs: a term that expired while its
// renewal queued behind a lock is lost, or a peer could already hold it.
func (c *suite) testRenewalThatWaitsPastTheExpiryIsLost(t *testing.T) {
	c.needLockKey(t)
	s := c.fresh(t)
	const key = "locked"
	e := c.mustAcquire(t, s, key, "a")
	ok, _, err := c.renewWhileLocked(t, s, key, e, c.ttl+c.unit)
	if err != nil || len(ok) != 1 || ok[0] {
		t.Fatalf("renewal of %q (epoch %d) that waited a unit past the expiry = %v, %v; want lost", key, e, ok, err)
	}
	checkLease(t, "List after the late renewal", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e})
}

// testTakeoverBlockedByALockStampsExpiryAfterTheWait is rule 3 for a new
// term: a takeover that waited for the lock must not start its term with
// an expiry read before the wait.
func (c *suite) testTakeoverBlockedByALockStampsExpiryAfterTheWait(t *testing.T) {
	c.needLockKey(t)
	s := c.fresh(t)
	const key = "locked"
	ea := c.mustAcquire(t, s, key, "a")
	c.release(t, s, "a", term(key, ea))
	var (
		res store.AcquireResult
		err error
	)
	unlocked := c.whileLocked(t, s, key, 2*c.unit, func(ctx context.Context) {
		res, err = s.Acquire(ctx, c.request(key, "b"))
	})
	if err != nil || !res.Acquired {
		t.Fatalf("b's takeover of released %q after the unlock = %+v, %v; want acquired", key, res, err)
	}
	l := c.lease(t, s, key)
	checkLease(t, "List after the takeover", l, store.Lease{Key: key, Owner: "b", Epoch: res.Epoch, Live: true})
	c.checkTimeLeft(t, "List after the takeover that waited 2 units for the lock", l.TimeLeft, c.ttl, unlocked, 0)
}

// testRenewalBlockedPastItsDeadlineFails pins the bounded-call rule: a
// renewal stuck behind a lock ends with its ctx and reports an error (the
// caller counts it unconfirmed), whatever the store's own lock timeout.
func (c *suite) testRenewalBlockedPastItsDeadlineFails(t *testing.T) {
	c.needLockKey(t)
	s := c.fresh(t)
	const key = "locked"
	e := c.mustAcquire(t, s, key, "a")
	var once sync.Once
	unlock := c.h.LockKey(t, s, key)
	t.Cleanup(func() { once.Do(unlock) })

	deadline := 2 * c.unit
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var (
		ok  []bool
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ok, err = s.Renew(ctx, "a", c.ttl, []store.RenewItem{{Key: key, Epoch: e}})
	}()
	limit := deadline + 5*c.unit + time.Second
	select {
	case <-done:
	case <-time.After(limit):
		once.Do(unlock) // let it finish, to report what it answered
		<-done
		t.Errorf("renewal of locked %q was still blocked %v after it started; its ctx ended after %v", key, limit, deadline)
	}
	if err == nil {
		t.Errorf("renewal of locked %q with a deadline of %v = %v and no error; want an error", key, deadline, ok)
	}
}
