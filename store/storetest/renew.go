package storetest

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func (c *suite) testRenewalExtendsTheTerm(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	start := time.Now()
	e := c.mustAcquire(t, s, key, "a")
	c.advance(t, s, 2*c.unit)
	c.checkTimeLeft(t, "List 2 units after the grant", c.lease(t, s, key).TimeLeft, c.ttl, start, 2*c.unit)

	start = time.Now()
	if !c.renewOne(t, s, "a", key, e) {
		t.Fatalf("renewal of %q by a (epoch %d) halfway through its term was refused", key, e)
	}
	c.checkTimeLeft(t, "List right after the renewal", c.lease(t, s, key).TimeLeft, c.ttl, start, 0)

	// Past the first expiry: only the renewal keeps the term alive.
	c.advance(t, s, 3*c.unit)
	h := c.mustBeRefused(t, s, key, "b")
	checkLease(t, "holder seen by b after the first expiry", h, store.Lease{Key: key, Owner: "a", Epoch: e, Live: true})
	if !c.renewOne(t, s, "a", key, e) {
		t.Errorf("second renewal of %q by a (epoch %d) was refused", key, e)
	}
}

func (c *suite) testRenewalOfAnotherEpochIsLost(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e := c.mustAcquire(t, s, key, "a")
	for _, other := range []int64{e + 1, e - 1, 0, -1} {
		if c.renewOne(t, s, "a", key, other) {
			t.Errorf("renewal of %q by a with epoch %d succeeded; its term is epoch %d", key, other, e)
		}
	}
	// The refused renewals changed nothing.
	checkLease(t, "List after refused renewals", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e, Live: true})
	if !c.renewOne(t, s, "a", key, e) {
		t.Errorf("renewal of %q by a with its own epoch %d was refused", key, e)
	}
}

func (c *suite) testRenewalAfterAPeersTakeoverIsLost(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	ea := c.mustAcquire(t, s, key, "a")
	c.release(t, s, "a", term(key, ea))
	eb := c.mustAcquire(t, s, key, "b")
	if c.renewOne(t, s, "a", key, ea) {
		t.Errorf("a renewed %q with its old epoch %d after b took it (epoch %d)", key, ea, eb)
	}
	if c.renewOne(t, s, "a", key, eb) {
		t.Errorf("a renewed %q with b's epoch %d", key, eb)
	}
	checkLease(t, "List after a's refused renewals", c.lease(t, s, key), store.Lease{Key: key, Owner: "b", Epoch: eb, Live: true})
}

func (c *suite) testRenewalOfAnExpiredTermIsLost(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e := c.mustAcquire(t, s, key, "a")
	c.advance(t, s, c.ttl+c.unit)
	if c.renewOne(t, s, "a", key, e) {
		t.Errorf("a renewed %q (epoch %d) a unit after it expired; an expired term is lost even if no peer took it", key, e)
	}
	checkLease(t, "List after the refused renewal", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e})
}

func (c *suite) testBatchedRenewalAnswersEachItemInOrder(t *testing.T) {
	s := c.fresh(t)
	began := time.Now()
	e1 := c.mustAcquire(t, s, "k1", "a")
	stale := c.mustAcquire(t, s, "k2", "a")
	e2 := c.mustAcquire(t, s, "k2", "a")
	e3 := c.mustAcquire(t, s, "k3", "b")
	e5 := c.mustAcquire(t, s, "k5", "a")
	c.release(t, s, "a", term("k5", e5))
	e6 := c.mustAcquire(t, s, "k6", "a")
	c.advance(t, s, c.unit)

	items := []store.RenewItem{
		{Key: "k1", Epoch: e1, Running: true},
		{Key: "k3", Epoch: e3, Running: true},    // b's term
		{Key: "k2", Epoch: stale, Running: true}, // a's previous term
		{Key: "k4", Epoch: 1, Running: true},     // never acquired
		{Key: "k5", Epoch: e5, Running: true},    // released
		{Key: "k6", Epoch: e6, Running: false},
	}
	want := []bool{true, false, false, false, false, true}
	start := time.Now()
	got := c.renew(t, s, "a", items...)
	for i, it := range items {
		if got[i] != want[i] {
			t.Errorf("batched renewal by a, item %d (key %q, epoch %d): renewed %t, want %t", i, it.Key, it.Epoch, got[i], want[i])
		}
	}

	byKey := map[string]store.Lease{}
	for _, l := range c.list(t, s, "") {
		byKey[l.Key] = l
	}
	checkLease(t, "k1 after the batch", byKey["k1"], store.Lease{Key: "k1", Owner: "a", Epoch: e1, Live: true})
	checkLease(t, "k2 after the batch", byKey["k2"], store.Lease{Key: "k2", Owner: "a", Epoch: e2, Live: true})
	checkLease(t, "k3 after the batch", byKey["k3"], store.Lease{Key: "k3", Owner: "b", Epoch: e3, Live: true})
	checkLease(t, "k5 after the batch", byKey["k5"], store.Lease{Key: "k5", Owner: "a", Epoch: e5, Released: true})
	checkLease(t, "k6 after the batch", byKey["k6"], store.Lease{Key: "k6", Owner: "a", Epoch: e6, Live: true})
	if l, ok := byKey["k4"]; ok {
		t.Errorf("renewing unknown key k4 created a record: %s", fmtLease(l))
	}
	if !byKey["k1"].Running || byKey["k6"].Running {
		t.Errorf("running flags after the batch: k1 %t, k6 %t; want true, false", byKey["k1"].Running, byKey["k6"].Running)
	}
	if byKey["k3"].Running {
		t.Errorf("a's refused renewal set the running flag of b's term of k3")
	}
	c.checkTimeLeft(t, "k1, renewed", byKey["k1"].TimeLeft, c.ttl, start, 0)
	if c.h.SharedExpiry && byKey["k2"].TimeLeft > c.ttl-c.unit {
		// k2's term shares its expiry with k1's and k6's: the renewal of
		// theirs may have extended it too, never shortened it.
		c.checkTimeLeft(t, "k2, not renewed but on k1's session", byKey["k2"].TimeLeft, c.ttl, start, 0)
	} else {
		c.checkTimeLeft(t, "k2, not renewed", byKey["k2"].TimeLeft, c.ttl, began, c.unit)
	}
}

func (c *suite) testRunningFlagIsRecorded(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	req := c.request(key, "a")
	req.Running = true
	res := c.acquire(t, s, req)
	if !res.Acquired {
		t.Fatalf("Acquire(key %q, owner a) was refused, holder %s", key, fmtLease(res.Holder))
	}
	if l := c.lease(t, s, key); !l.Running {
		t.Errorf("acquired with Running true, List shows %s", fmtLease(l))
	}
	if h := c.mustBeRefused(t, s, key, "b"); !h.Running {
		t.Errorf("acquired with Running true, peer b sees holder %s", fmtLease(h))
	}
	for _, running := range []bool{false, true, false} {
		if !c.renew(t, s, "a", store.RenewItem{Key: key, Epoch: res.Epoch, Running: running})[0] {
			t.Fatalf("renewal of %q by a (epoch %d) was refused", key, res.Epoch)
		}
		if l := c.lease(t, s, key); l.Running != running {
			t.Errorf("renewed with Running %t, List shows %s", running, fmtLease(l))
		}
	}
}

func (c *suite) testEmptyBatchesAreNoOps(t *testing.T) {
	s := c.fresh(t)
	ok, err := s.Renew(c.ctx(t), "a", c.ttl, nil)
	if err != nil || len(ok) != 0 {
		t.Errorf("Renew with no items = %v, %v; want no results and no error", ok, err)
	}
	if err := s.Release(c.ctx(t), "a", nil); err != nil {
		t.Errorf("Release with no terms: %v", err)
	}
}

// testRenewalListingATermTwiceAnswersEveryItem pins that the answers follow
// the items, not the distinct terms: a batch may name a term twice (a
// caller's bookkeeping need not deduplicate), and each item gets its own
// answer, the same for both.
func (c *suite) testRenewalListingATermTwiceAnswersEveryItem(t *testing.T) {
	s := c.fresh(t)
	e1 := c.mustAcquire(t, s, "k1", "a")
	e2 := c.mustAcquire(t, s, "k2", "a")
	items := []store.RenewItem{
		{Key: "k1", Epoch: e1, Running: true},
		{Key: "k2", Epoch: e2},
		{Key: "k1", Epoch: e1 + 1}, // not the term: lost
		{Key: "k1", Epoch: e1},     // the first item again
	}
	want := []bool{true, true, false, true}
	for round := range 2 { // some stores take another path once a batch is known
		got := c.renew(t, s, "a", items...)
		for i, it := range items {
			if got[i] != want[i] {
				t.Errorf("round %d, item %d (key %q, epoch %d): renewed %t, want %t", round, i, it.Key, it.Epoch, got[i], want[i])
			}
		}
	}
	checkLease(t, "k1 after the renewals", c.lease(t, s, "k1"), store.Lease{Key: "k1", Owner: "a", Epoch: e1, Live: true})
}
