package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// testListFiltersByPrefixAndSortsByBytes pins byte order, which is what Go
// sorts by; a locale collation (en_US ignores '-' and '_') fails it.
func (c *suite) testListFiltersByPrefixAndSortsByBytes(t *testing.T) {
	s := c.fresh(t)
	keys := []string{"b/2", "a/1", "b/10", "b/1", "b", "B/1", "b/_x", "b/-x", "b/\u00e9", "b/e", "b/Z", "c"}
	for _, k := range keys {
		c.mustAcquire(t, s, k, "a")
	}
	all := slices.Clone(keys)
	slices.Sort(all)
	for _, prefix := range []string{"", "b/", "b", "B", "b/1", "zzz"} {
		var want []string
		for _, k := range all {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		if got := leaseKeys(c.list(t, s, prefix)); !slices.Equal(got, want) {
			t.Errorf("List(%q) keys = %q, want %q", prefix, got, want)
		}
	}
}

// testListTreatsPrefixLiterally pins that a prefix is not a pattern: SQL
// LIKE wildcards, escapes and Redis glob characters match only themselves.
func (c *suite) testListTreatsPrefixLiterally(t *testing.T) {
	s := c.fresh(t)
	specials := []string{"_", "%", `\`, "*", "?", "[", "]", ".", "^", "$", "'", `"`, "{"}
	for _, sp := range specials {
		c.mustAcquire(t, s, "a"+sp+"1", "a")
	}
	c.mustAcquire(t, s, "ab1", "a")
	c.mustAcquire(t, s, "a", "a")
	for _, sp := range specials {
		prefix := "a" + sp
		got := leaseKeys(c.list(t, s, prefix))
		if want := []string{prefix + "1"}; !slices.Equal(got, want) {
			t.Errorf("List(%q) keys = %q, want %q", prefix, got, want)
		}
	}
}

// testListPrefixesMayEndInsideACharacter pins that a prefix is a byte
// prefix: it may cut a character in two (and so not be valid UTF-8), and
// one with a NUL or a 0xFF byte, which no key holds, matches nothing.
func (c *suite) testListPrefixesMayEndInsideACharacter(t *testing.T) {
	s := c.fresh(t)
	for _, k := range []string{"\u00e9/x", "j\u00f6b", "job", "\U0001F600", "e"} {
		c.mustAcquire(t, s, k, "a")
	}
	for prefix, want := range map[string][]string{
		"\xc3":          {"\u00e9/x"}, // the first byte of é
		"j\xc3":         {"j\u00f6b"},
		"\xf0\x9f":      {"\U0001F600"},
		"\xc3\xa9/\xff": nil,
		"\xff":          nil,
		"jo\x00":        nil,
	} {
		if got := leaseKeys(c.list(t, s, prefix)); !slices.Equal(got, want) {
			t.Errorf("List(%q) keys = %q, want %q", prefix, got, want)
		}
	}
}

func (c *suite) testListShowsEveryFieldOnTheStoresClock(t *testing.T) {
	s := c.fresh(t)
	start := time.Now()
	req := c.request("l/running", "a")
	req.Running = true
	running := c.acquire(t, s, req)
	if !running.Acquired {
		t.Fatalf("Acquire(key %q, owner a) was refused, holder %s", req.Key, fmtLease(running.Holder))
	}
	idle := c.mustAcquire(t, s, "l/idle", "b")
	released := c.mustAcquire(t, s, "l/released", "c")
	c.release(t, s, "c", term("l/released", released))
	c.mustAcquire(t, s, "other", "d")
	c.advance(t, s, c.unit)

	got := c.list(t, s, "l/")
	if keys := leaseKeys(got); !slices.Equal(keys, []string{"l/idle", "l/released", "l/running"}) {
		t.Fatalf("List(%q) keys = %q, want [l/idle l/released l/running]", "l/", keys)
	}
	checkLease(t, "idle term", got[0], store.Lease{Key: "l/idle", Owner: "b", Epoch: idle, Live: true})
	checkLease(t, "released term", got[1], store.Lease{Key: "l/released", Owner: "c", Epoch: released, Released: true})
	checkLease(t, "running term", got[2], store.Lease{Key: "l/running", Owner: "a", Epoch: running.Epoch, Live: true})
	if got[0].Running || !got[2].Running {
		t.Errorf("running flags: l/idle %t, l/running %t; want false, true", got[0].Running, got[2].Running)
	}
	c.checkTimeLeft(t, "l/running one unit after the grant", got[2].TimeLeft, c.ttl, start, c.unit)
	c.checkTimeLeft(t, "l/idle one unit after the grant", got[0].TimeLeft, c.ttl, start, c.unit)
	if got[1].TimeLeft > 0 {
		t.Errorf("released term: TimeLeft %v, want ≤ 0", got[1].TimeLeft)
	}
}

func (c *suite) testWatchReportsReleasesUntilCancelled(t *testing.T) {
	w, ok := c.fresh(t).(store.Watcher)
	if !ok {
		t.Skip("the store does not implement store.Watcher")
	}
	s := w.(store.Store)
	ctx, cancel := context.WithCancel(c.ctx(t))
	defer cancel()
	events, err := w.Watch(ctx, "w/")
	if err != nil {
		t.Fatalf("Watch(%q): %v", "w/", err)
	}
	const key = "w/1"
	e := c.mustAcquire(t, s, key, "a")
	outside := c.mustAcquire(t, s, "x/1", "a")
	c.release(t, s, "a", term("x/1", outside))
	c.release(t, s, "a", term(key, e))

	wait := 5 * c.unit
	timeout := time.After(wait)
	for found := false; !found; {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("the watch channel closed before the release of %q arrived", key)
			}
			if !strings.HasPrefix(ev.Key, "w/") {
				t.Errorf("Watch(%q) delivered an event for %q", "w/", ev.Key)
			}
			if ev.Kind != store.Released || ev.Key != key {
				continue
			}
			found = true
			// Owner and epoch are optional in an event, but must be right when set.
			if (ev.Owner != "" && ev.Owner != "a") || (ev.Epoch != 0 && ev.Epoch != e) {
				t.Errorf("release event of %q: owner %q epoch %d, want a, %d", key, ev.Owner, ev.Epoch, e)
			}
		case <-timeout:
			t.Fatalf("no Released event for %q (owner a, epoch %d) within %v", key, e, wait)
		}
	}

	cancel()
	if !closesWithin(events, wait) {
		t.Errorf("the watch channel is still open %v after its ctx was cancelled", wait)
	}
}

func (c *suite) testRevokeFencesTheHolderAndFreesTheKeyAfterExpiryPlusGrace(t *testing.T) {
	r, ok := c.fresh(t).(store.Revoker)
	if !ok {
		t.Skip("the store does not implement store.Revoker")
	}
	s := r.(store.Store)
	const key = "k"
	e := c.mustAcquire(t, s, key, "a")
	revoked, err := r.Revoke(c.ctx(t), key)
	if err != nil || !revoked {
		t.Fatalf("Revoke(%q) held by a (epoch %d) = %t, %v; want true", key, e, revoked, err)
	}
	if again, err := r.Revoke(c.ctx(t), key); err != nil || again {
		t.Errorf("second Revoke(%q) = %t, %v; want false, nil: no live term is left", key, again, err)
	}
	l := c.lease(t, s, key)
	if l.Owner != "" || l.Epoch <= e || l.Live {
		t.Errorf("List after Revoke(%q): %s; want no owner, an epoch > %d, not live", key, fmtLease(l), e)
	}
	if c.renewOne(t, s, "a", key, e) {
		t.Errorf("a renewed %q (epoch %d) after it was revoked", key, e)
	}
	c.mustBeRefused(t, s, key, "b")
	// The revoked term's expiry is kept: a holder that never hears of the
	// revocation may run until it, so peers wait for it + grace.
	c.advance(t, s, c.grace+c.unit)
	c.mustBeRefused(t, s, key, "b")

	c.advance(t, s, c.ttl)
	if eb := c.mustAcquire(t, s, key, "b"); eb <= l.Epoch {
		t.Errorf("b took revoked %q with epoch %d, want > %d (the revocation's epoch)", key, eb, l.Epoch)
	}

	er := c.mustAcquire(t, s, "released", "a")
	c.release(t, s, "a", term("released", er))
	if revoked, err := r.Revoke(c.ctx(t), "released"); err != nil || revoked {
		t.Errorf("Revoke of a released term = %t, %v; want false, nil", revoked, err)
	}
	checkLease(t, "List after revoking a released term", c.lease(t, s, "released"), store.Lease{Key: "released", Owner: "a", Epoch: er, Released: true})

	revoked, err = r.Revoke(c.ctx(t), "never-acquired")
	if err != nil || revoked {
		t.Errorf("Revoke of a key without a record = %t, %v; want false, nil", revoked, err)
	}
	if ls := c.list(t, s, "never-acquired"); len(ls) != 0 {
		t.Errorf("Revoke of a key without a record created %s", fmtLease(ls[0]))
	}
}
