package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// pruner returns s as a store.Pruner or skips the test.
func pruner(t *testing.T, s store.Store) store.Pruner {
	t.Helper()
	p, ok := s.(store.Pruner)
	if !ok {
		t.Skip("the store cannot prune")
	}
	return p
}

// pruneUntil prunes prefix with age olderThan, letting olderThan pass on
// the store's clock between calls, until none of gone is listed. A store
// that keeps no end time on its records (etcd) marks a dead record on one
// call and deletes it on a call at least olderThan later, so it may take
// two calls. It returns how many records the calls deleted.
func (c *suite) pruneUntil(t *testing.T, s store.Store, prefix string, olderThan time.Duration, gone ...string) int {
	t.Helper()
	p := pruner(t, s)
	total := 0
	for round := range 4 {
		n, err := p.Prune(c.ctx(t), prefix, olderThan)
		if err != nil {
			t.Fatalf("Prune(%q, %v): %v", prefix, olderThan, err)
		}
		total += n
		left := slices.ContainsFunc(leaseKeys(c.list(t, s, "")), func(k string) bool { return slices.Contains(gone, k) })
		if !left {
			return total
		}
		if round < 3 {
			c.advance(t, s, olderThan+c.unit)
		}
	}
	t.Fatalf("Prune(%q, %v) left some of %q after 4 calls: %q", prefix, olderThan, gone, leaseKeys(c.list(t, s, "")))
	return total
}

// testPruneDeletesDeadRecordsAndEpochsStillGrow pins tenure prune: records
// whose term ended long enough ago go, live ones and other prefixes stay,
// and a pruned key acquired again starts above every epoch it had.
func (c *suite) testPruneDeletesDeadRecordsAndEpochsStillGrow(t *testing.T) {
	s := c.fresh(t)
	p := pruner(t, s)
	long := store.AcquireRequest{Key: "p/live", Owner: "a", TTL: time.Hour, Grace: c.grace}
	if !c.acquire(t, s, long).Acquired {
		t.Fatal("p/live was refused")
	}
	released := c.mustAcquire(t, s, "p/released", "a")
	c.release(t, s, "a", term("p/released", released))
	expired := c.mustAcquire(t, s, "p/expired", "a")
	other := c.mustAcquire(t, s, "q/other", "a")
	c.release(t, s, "a", term("q/other", other))
	c.advance(t, s, c.ttl+c.grace+c.unit)

	n, err := p.Prune(c.ctx(t), "p/", time.Hour)
	if err != nil || n != 0 {
		t.Fatalf("Prune(p/, 1h) = %d, %v; want nothing deleted: every term ended under an hour ago", n, err)
	}
	before := leaseKeys(c.list(t, s, ""))
	if want := []string{"p/expired", "p/live", "p/released", "q/other"}; !slices.Equal(before, want) {
		t.Fatalf("after Prune(p/, 1h) List = %q, want %q", before, want)
	}

	if n := c.pruneUntil(t, s, "p/", c.unit, "p/released", "p/expired"); n != 2 {
		t.Errorf("Prune(p/, %v) deleted %d records, want 2 (p/released, p/expired)", c.unit, n)
	}
	after := c.list(t, s, "")
	if want := []string{"p/live", "q/other"}; !slices.Equal(leaseKeys(after), want) {
		t.Fatalf("after pruning p/ List = %q, want %q: live terms and other prefixes stay", leaseKeys(after), want)
	}
	if !after[0].Live {
		t.Errorf("p/live after the prune: %s, want it still live", fmtLease(after[0]))
	}
	for _, k := range []struct {
		key string
		old int64
	}{{"p/released", released}, {"p/expired", expired}} {
		if e := c.mustAcquire(t, s, k.key, "b"); e <= k.old {
			t.Errorf("%s acquired after its record was pruned: epoch %d, want > %d (the epoch it had)", k.key, e, k.old)
		}
	}
}

// testPruneRejectsAnAgeUnderAMillisecond pins the one invalid input.
func (c *suite) testPruneRejectsAnAgeUnderAMillisecond(t *testing.T) {
	s := c.fresh(t)
	p := pruner(t, s)
	for _, d := range []time.Duration{0, -time.Hour, time.Microsecond} {
		_, err := p.Prune(c.ctx(t), "", d)
		wantErr(t, "Prune with older-than "+d.String(), err, store.ErrInvalidDuration)
	}
}

// testPruneRacingAcquisitionsNeverRepeatsAnEpoch races a prune that
// deletes every released record at once against an owner that keeps
// acquiring and releasing the same keys: whichever wins, every term of a
// key gets an epoch above all its earlier ones. It goes on until the
// prunes have deleted records a few times, within a deadline. A store
// that marks a record before it deletes it (etcd) deletes nothing while
// every key is taken again within milliseconds, so when the first 100
// terms prune nothing, the loop slows down and leaves each key dead for
// 4 units between its terms.
func (c *suite) testPruneRacingAcquisitionsNeverRepeatsAnEpoch(t *testing.T) {
	s := c.fresh(t)
	p := pruner(t, s)
	ctx, cancel := context.WithCancel(c.ctx(t))
	defer cancel()
	var pruned atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			n, err := p.Prune(ctx, "race/", time.Millisecond)
			if err != nil && ctx.Err() == nil {
				t.Errorf("Prune during the race: %v", err)
			}
			pruned.Add(int64(n))
		}
	}()
	const keys = 8
	deadline := time.Now().Add(25 * time.Second)
	last := map[string]int64{}
	for i := 0; i < 100 || pruned.Load() < 5; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d terms in 25s the prunes had deleted %d records; want 5", i, pruned.Load())
		}
		if i >= 100 && pruned.Load() == 0 {
			c.advance(t, s, c.unit/2)
		}
		key := fmt.Sprintf("race/%d", i%keys)
		res, err := s.Acquire(ctx, c.request(key, "a"))
		if err != nil {
			t.Fatalf("Acquire(%q) during the race: %v", key, err)
		}
		if !res.Acquired {
			t.Fatalf("Acquire(%q) was refused by %s; the key was released", key, fmtLease(res.Holder))
		}
		if res.Epoch <= last[key] {
			t.Fatalf("term %d of %q got epoch %d, want > %d: an epoch repeated across a prune", i, key, res.Epoch, last[key])
		}
		last[key] = res.Epoch
		if err := s.Release(ctx, "a", []store.Term{term(key, res.Epoch)}); err != nil {
			t.Fatalf("Release(%q) during the race: %v", key, err)
		}
		if c.h.InstantAdvance {
			c.advance(t, s, time.Millisecond) // the prune's age, on an injected clock
		}
	}
	cancel()
	<-done
}
