package storetest

import (
	"fmt"
	"testing"

	"github.com/tenure-dev/tenure/store"
)

func (c *suite) testReleasedKeyCanBeTakenAtOnce(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e := c.mustAcquire(t, s, key, "a")
	c.release(t, s, "a", term(key, e))

	l := c.lease(t, s, key)
	checkLease(t, "List after the release", l, store.Lease{Key: key, Owner: "a", Epoch: e, Released: true})
	if l.TimeLeft > 0 {
		t.Errorf("List after the release of %q (owner a, epoch %d): TimeLeft %v, want ≤ 0", key, e, l.TimeLeft)
	}

	// No Advance: a released key needs no grace.
	eb := c.mustAcquire(t, s, key, "b")
	if eb <= e {
		t.Errorf("b took released %q with epoch %d, want > %d", key, eb, e)
	}
	checkLease(t, "List after b's acquisition", c.lease(t, s, key), store.Lease{Key: key, Owner: "b", Epoch: eb, Live: true})
}

// testReleasingAnExpiredTermFreesItAtOnce pins that a holder whose term ran
// out (its runner already stopped) can still hand the key over without
// making peers sit out the grace period.
func (c *suite) testReleasingAnExpiredTermFreesItAtOnce(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e := c.mustAcquire(t, s, key, "a")
	c.advance(t, s, c.ttl+c.unit)
	if r, ok := s.(store.Revoker); ok {
		// Nothing to fence: an expired term has no holder left.
		if revoked, err := r.Revoke(c.ctx(t), key); err != nil || revoked {
			t.Errorf("Revoke of expired %q = %t, %v; want false, nil", key, revoked, err)
		}
	}
	c.release(t, s, "a", term(key, e))
	checkLease(t, "List after releasing the expired term", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e, Released: true})
	if eb := c.mustAcquire(t, s, key, "b"); eb <= e {
		t.Errorf("b took released %q with epoch %d, want > %d", key, eb, e)
	}
}

func (c *suite) testReleasingAnotherTermChangesNothing(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e1 := c.mustAcquire(t, s, key, "a")
	c.release(t, s, "b", term(key, e1)) // b does not own it
	c.release(t, s, "a", term(key, e1+1))
	checkLease(t, "List after releases of terms a does not hold", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e1, Live: true})

	e2 := c.mustAcquire(t, s, key, "a")
	c.release(t, s, "a", term(key, e1)) // a's previous term
	checkLease(t, "List after a released its previous term", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e2, Live: true})
	if !c.renewOne(t, s, "a", key, e2) {
		t.Errorf("renewal of %q by a (epoch %d) was refused after a released its stale epoch %d", key, e2, e1)
	}
	c.mustBeRefused(t, s, key, "b")

	c.release(t, s, "a", term("never-acquired", 1))
	for _, l := range c.list(t, s, "") {
		if l.Key != key {
			t.Errorf("releasing an unknown key created a record: %s", fmtLease(l))
		}
	}
}

func (c *suite) testReleaseEndsSeveralTermsInOneCall(t *testing.T) {
	s := c.fresh(t)
	epochs := map[string]int64{}
	for _, k := range []string{"k1", "k2", "k3"} {
		epochs[k] = c.mustAcquire(t, s, k, "a")
	}
	c.release(t, s, "a", term("k1", epochs["k1"]), term("k2", epochs["k2"]))
	for _, k := range []string{"k1", "k2"} {
		if e := c.mustAcquire(t, s, k, "b"); e <= epochs[k] {
			t.Errorf("b took released %q with epoch %d, want > %d", k, e, epochs[k])
		}
	}
	h := c.mustBeRefused(t, s, "k3", "b")
	checkLease(t, "k3, not in the release", h, store.Lease{Key: "k3", Owner: "a", Epoch: epochs["k3"], Live: true})
}

func (c *suite) testEpochsKeepGrowingAcrossReleasesAndExpiries(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	var last int64
	next := func(what string, e int64) {
		t.Helper()
		if e <= last {
			t.Errorf("%s: epoch %d of %q, want > %d", what, e, key, last)
		}
		last = e
	}
	for i := range 3 {
		o := owner(i % 2)
		e := c.mustAcquire(t, s, key, o)
		next(fmt.Sprintf("round %d: %s acquired", i, o), e)
		c.release(t, s, o, term(key, e))
	}
	e := c.mustAcquire(t, s, key, "a")
	next("a after the releases", e)
	c.advance(t, s, c.ttl+c.grace+c.unit)
	next("b after a's term expired", c.mustAcquire(t, s, key, "b"))
}

// testReleaseListingOldAndCurrentTermsEndsTheCurrentOne pins that a key named
// twice in one release, once with a stale epoch, is still released: the
// stale term changes nothing and the current one ends.
func (c *suite) testReleaseListingOldAndCurrentTermsEndsTheCurrentOne(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	old := c.mustAcquire(t, s, key, "a")
	cur := c.mustAcquire(t, s, key, "a")
	c.release(t, s, "a", term(key, old), term(key, cur))
	l := c.lease(t, s, key)
	checkLease(t, "List after releasing the old and the current term", l, store.Lease{Key: key, Owner: "a", Epoch: cur, Released: true})
	if l.Running || l.TimeLeft > 0 {
		t.Errorf("released term of %q: %s, want not running and no time left", key, fmtLease(l))
	}
	if eb := c.mustAcquire(t, s, key, "b"); eb <= cur {
		t.Errorf("b took released %q with epoch %d, want > %d", key, eb, cur)
	}
}
