package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func (c *suite) testFreeKeyIsGrantedAndPeersSeeTheHolder(t *testing.T) {
	s := c.fresh(t)
	const key = "jobs/nightly-report"
	e := c.mustAcquire(t, s, key, "a")

	h := c.mustBeRefused(t, s, key, "b")
	checkLease(t, "holder seen by peer b", h, store.Lease{Key: key, Owner: "a", Epoch: e, Live: true})
	if h.TimeLeft <= 0 || h.TimeLeft > c.ttl+time.Millisecond {
		t.Errorf("holder of %q (owner a, epoch %d) seen by b: TimeLeft %v, want in (0, %v]", key, e, h.TimeLeft, c.ttl)
	}
	checkLease(t, "List after the grant", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e, Live: true})
}

func (c *suite) testExpiredTermBlocksPeersUntilGraceHasPassed(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e := c.mustAcquire(t, s, key, "a")

	c.advance(t, s, c.ttl+c.grace/2)
	h := c.mustBeRefused(t, s, key, "b")
	checkLease(t, "holder seen by b after expiry, within grace", h, store.Lease{Key: key, Owner: "a", Epoch: e})
	if h.TimeLeft > 0 {
		t.Errorf("expired holder of %q (owner a, epoch %d): TimeLeft %v, want ≤ 0", key, e, h.TimeLeft)
	}
	l := c.lease(t, s, key)
	checkLease(t, "List after expiry", l, store.Lease{Key: key, Owner: "a", Epoch: e})
	if l.TimeLeft > 0 {
		t.Errorf("List after expiry of %q (owner a, epoch %d): TimeLeft %v, want ≤ 0", key, e, l.TimeLeft)
	}

	c.advance(t, s, c.grace/2+c.unit)
	if e2 := c.mustAcquire(t, s, key, "b"); e2 <= e {
		t.Errorf("b took %q after expiry+grace with epoch %d, want > %d (a's epoch)", key, e2, e)
	}
}

func (c *suite) testOwnerReacquiringStartsANewTerm(t *testing.T) {
	s := c.fresh(t)
	const key = "k"
	e1 := c.mustAcquire(t, s, key, "a")
	e2 := c.mustAcquire(t, s, key, "a")
	if e2 <= e1 {
		t.Fatalf("a re-acquired its live term of %q: epoch %d, want > %d", key, e2, e1)
	}
	if c.renewOne(t, s, "a", key, e1) {
		t.Errorf("renewal of %q by a with the old epoch %d succeeded; the new term %d must fence it", key, e1, e2)
	}
	if !c.renewOne(t, s, "a", key, e2) {
		t.Errorf("renewal of %q by a with the new epoch %d was refused", key, e2)
	}
	checkLease(t, "List after re-acquisition", c.lease(t, s, key), store.Lease{Key: key, Owner: "a", Epoch: e2, Live: true})
}

func (c *suite) testConcurrentAcquisitionsGrantExactlyOne(t *testing.T) {
	s := c.fresh(t)
	const key, n = "contended", 50
	results := make([]store.AcquireResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			// The race is about exclusivity, not time: under load 50
			// calls may outlast a TTL of a few units, and the List
			// below would then rightly find the winner's term over.
			req := c.request(key, owner(i))
			req.TTL = c.callTimeout
			results[i], errs[i] = s.Acquire(c.ctx(t), req)
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, res := range results {
		if errs[i] != nil {
			t.Errorf("Acquire(key %q, owner %q) among %d concurrent callers: %v", key, owner(i), n, errs[i])
			continue
		}
		if res.Acquired {
			if winner >= 0 {
				t.Errorf("both %q (epoch %d) and %q (epoch %d) acquired %q", owner(winner), results[winner].Epoch, owner(i), res.Epoch, key)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("none of %d concurrent callers acquired free key %q", n, key)
	}
	w := results[winner]
	for i, res := range results {
		if errs[i] == nil && !res.Acquired && (res.Holder.Owner != owner(winner) || res.Holder.Epoch != w.Epoch) {
			t.Errorf("%q was refused by holder %s; the only term is %q epoch %d", owner(i), fmtLease(res.Holder), owner(winner), w.Epoch)
		}
	}
	checkLease(t, "List after the race", c.lease(t, s, key), store.Lease{Key: key, Owner: owner(winner), Epoch: w.Epoch, Live: true})
}

// testConcurrentTakeoversGrantExactlyOne races peers for a released key and
// for one whose term expired grace ago: the store must hand each to exactly
// one of them, however its conditional update is written.
func (c *suite) testConcurrentTakeoversGrantExactlyOne(t *testing.T) {
	s := c.fresh(t)
	old := map[string]int64{
		"released": c.mustAcquire(t, s, "released", "a"),
		"expired":  c.mustAcquire(t, s, "expired", "a"),
	}
	c.release(t, s, "a", term("released", old["released"]))
	c.advance(t, s, c.ttl+c.grace+c.unit)

	const n = 20
	type grant struct {
		owner string
		epoch int64
	}
	var (
		mu     sync.Mutex
		grants = map[string][]grant{}
		wg     sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range n {
		for key := range old {
			wg.Go(func() {
				<-start
				res, err := s.Acquire(c.ctx(t), c.request(key, owner(i)))
				switch {
				case err != nil:
					t.Errorf("Acquire(key %q, owner %q) among %d racing peers: %v", key, owner(i), n, err)
				case res.Acquired:
					mu.Lock()
					grants[key] = append(grants[key], grant{owner(i), res.Epoch})
					mu.Unlock()
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for key, e := range old {
		g := grants[key]
		if len(g) != 1 {
			t.Errorf("%d of %d racing peers acquired the %s key %q, want exactly one: %+v", len(g), n, key, key, g)
			continue
		}
		if g[0].epoch <= e {
			t.Errorf("%q took the %s key %q with epoch %d, want > %d", g[0].owner, key, key, g[0].epoch, e)
		}
		checkLease(t, "List after the race for "+key, c.lease(t, s, key), store.Lease{Key: key, Owner: g[0].owner, Epoch: g[0].epoch, Live: true})
	}
}

func owner(i int) string { return fmt.Sprintf("owner-%02d", i) }

// testKeysAreByteExact pins that keys are compared byte for byte: no case
// folding, no trailing-space padding (MySQL's PAD SPACE collations), no
// Unicode normalization.
func (c *suite) testKeysAreByteExact(t *testing.T) {
	s := c.fresh(t)
	keys := []string{"Job", "job", "job ", " job", "caf\u00e9", "cafe\u0301", "ss", "\u00df", "k\u212a", "kK"}
	epochs := map[string]int64{}
	for i, k := range keys {
		epochs[k] = c.mustAcquire(t, s, k, owner(i))
	}
	got := c.list(t, s, "")
	want := slices.Clone(keys)
	slices.Sort(want)
	if len(got) != len(want) {
		t.Fatalf("List(\"\") returned %d records, want %d: %v", len(got), len(want), leaseKeys(got))
	}
	for i, l := range got {
		if l.Key != want[i] {
			t.Errorf("List(\"\")[%d].Key = %q, want %q (byte order, byte-exact)", i, l.Key, want[i])
			continue
		}
		wantOwner := owner(slices.Index(keys, l.Key))
		checkLease(t, fmt.Sprintf("record of %q", l.Key), l, store.Lease{Key: l.Key, Owner: wantOwner, Epoch: epochs[l.Key], Live: true})
	}
	if got := leaseKeys(c.list(t, s, "job")); !slices.Equal(got, []string{"job", "job "}) {
		t.Errorf("List(%q) keys = %q, want %q", "job", got, []string{"job", "job "})
	}
}

// testLongestKeysAndOwnersAreKept pins that 512-byte keys and owners, in
// ASCII and in two-byte runes, are stored without truncation.
func (c *suite) testLongestKeysAndOwnersAreKept(t *testing.T) {
	s := c.fresh(t)
	long := strings.Repeat("\u00e9", store.MaxKeyBytes/2)
	for _, key := range []string{strings.Repeat("k", store.MaxKeyBytes), long} {
		e := c.mustAcquire(t, s, key, long)
		checkLease(t, fmt.Sprintf("record of the %d-byte key %.12q…", len(key), key), c.lease(t, s, key),
			store.Lease{Key: key, Owner: long, Epoch: e, Live: true})
		if !c.renewOne(t, s, long, key, e) {
			t.Errorf("renewal of the %d-byte key %.12q… (epoch %d) by its 512-byte owner was refused", len(key), key, e)
		}
	}
}

func (c *suite) testInvalidInputIsRejected(t *testing.T) {
	s := c.fresh(t)
	bad := map[string]string{
		"empty":         "",
		"513 bytes":     strings.Repeat("k", store.MaxKeyBytes+1),
		"invalid UTF-8": "k\xff",
		"NUL":           "k\x00k",
		"newline":       "k\n",
		"DEL":           "k\x7f",
		"C1 control":    "k\u0085",
	}
	ctx := c.ctx(t)
	good := c.request("k", "a")
	for name, v := range bad {
		req := good
		req.Key = v
		_, err := s.Acquire(ctx, req)
		wantErr(t, "Acquire with key "+name, err, store.ErrInvalidKey)
		_, err = s.Renew(ctx, "a", c.ttl, []store.RenewItem{{Key: "k", Epoch: 1}, {Key: v, Epoch: 1}})
		wantErr(t, "Renew with key "+name, err, store.ErrInvalidKey)
		err = s.Release(ctx, "a", []store.Term{{Key: "k", Epoch: 1}, {Key: v, Epoch: 1}})
		wantErr(t, "Release with key "+name, err, store.ErrInvalidKey)
		if r, ok := s.(store.Revoker); ok {
			_, err = r.Revoke(ctx, v)
			wantErr(t, "Revoke with key "+name, err, store.ErrInvalidKey)
		}

		req = good
		req.Owner = v
		_, err = s.Acquire(ctx, req)
		wantErr(t, "Acquire with owner "+name, err, store.ErrInvalidOwner)
		_, err = s.Renew(ctx, v, c.ttl, []store.RenewItem{{Key: "k", Epoch: 1}})
		wantErr(t, "Renew with owner "+name, err, store.ErrInvalidOwner)
		err = s.Release(ctx, v, []store.Term{{Key: "k", Epoch: 1}})
		wantErr(t, "Release with owner "+name, err, store.ErrInvalidOwner)
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond - 1, store.MaxTTL + 1} {
		req := good
		req.TTL = ttl
		_, err := s.Acquire(ctx, req)
		wantErr(t, fmt.Sprintf("Acquire with ttl %v", ttl), err, store.ErrInvalidDuration)
		_, err = s.Renew(ctx, "a", ttl, []store.RenewItem{{Key: "k", Epoch: 1}})
		wantErr(t, fmt.Sprintf("Renew with ttl %v", ttl), err, store.ErrInvalidDuration)
	}
	for _, grace := range []time.Duration{-time.Millisecond, store.MaxTTL + 1} {
		req := good
		req.Grace = grace
		_, err := s.Acquire(ctx, req)
		wantErr(t, fmt.Sprintf("Acquire with grace %v", grace), err, store.ErrInvalidDuration)
	}
	for _, maxElapsed := range []time.Duration{-time.Millisecond, c.ttl} {
		req := good
		req.MaxElapsed = maxElapsed
		_, err := s.Acquire(ctx, req)
		wantErr(t, fmt.Sprintf("Acquire with max elapsed %v", maxElapsed), err, store.ErrInvalidDuration)
	}

	if ls := c.list(t, s, ""); len(ls) != 0 {
		t.Errorf("rejected calls left records behind: %v", leaseKeys(ls))
	}
	// Zero grace is valid: an expired key is free at once.
	req := good
	req.Grace = 0
	if res := c.acquire(t, s, req); !res.Acquired {
		t.Errorf("Acquire with grace 0 on a free key was refused, holder %s", fmtLease(res.Holder))
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want one matching %v", what, err, want)
	}
}

// testDoneContextNeverSucceeds pins rule 6 from the caller's side: a call
// whose ctx is already cancelled or past its deadline reports an error, so
// the engine can never mistake it for a renewal or a grant.
func (c *suite) testDoneContextNeverSucceeds(t *testing.T) {
	dones := map[string]func() context.Context{
		"cancelled": func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		},
		"past deadline": func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		},
	}
	for name, done := range dones {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			s := c.fresh(t)
			e := c.mustAcquire(t, s, "held", "a")

			if res, err := s.Acquire(done(), c.request("free", "a")); err == nil {
				t.Errorf("Acquire(key %q) with a %s ctx: no error (acquired %t, epoch %d)", "free", name, res.Acquired, res.Epoch)
			}
			if ok, err := s.Renew(done(), "a", c.ttl, []store.RenewItem{{Key: "held", Epoch: e}}); err == nil {
				t.Errorf("Renew(key %q, owner a, epoch %d) with a %s ctx: no error (results %v)", "held", e, name, ok)
			}
			if _, err := s.List(done(), ""); err == nil {
				t.Errorf("List with a %s ctx: no error", name)
			}
			if r, ok := s.(store.Revoker); ok {
				if revoked, err := r.Revoke(done(), "held"); err == nil {
					t.Errorf("Revoke(key %q) with a %s ctx: no error (revoked %t)", "held", name, revoked)
				}
			}
			if err := s.Release(done(), "a", []store.Term{{Key: "held", Epoch: e}}); err == nil {
				t.Errorf("Release(key %q, owner a, epoch %d) with a %s ctx: no error", "held", e, name)
			}
			if w, ok := s.(store.Watcher); ok {
				ch, err := w.Watch(done(), "")
				if err == nil && !closesWithin(ch, 5*c.unit) {
					t.Errorf("Watch with a %s ctx: no error and a channel still open after %v", name, 5*c.unit)
				}
			}
		})
	}
}

// closesWithin drains ch and reports whether it closes within d.
func closesWithin(ch <-chan store.Event, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

func leaseKeys(ls []store.Lease) []string {
	keys := make([]string, len(ls))
	for i, l := range ls {
		keys[i] = l.Key
	}
	return keys
}

// testADatedTermKeepsItsPromise: a store may date a new term back by up
// to the request's MaxElapsed (AcquireResult.Elapsed), never more, and
// the term then lives until at least the call's start - Elapsed + TTL.
// The first acquisition may start a store's session; the later ones may
// find it alive and date their terms from then.
func (c *suite) testADatedTermKeepsItsPromise(t *testing.T) {
	s := c.fresh(t)
	maxElapsed := c.ttl / 2
	for _, key := range []string{"d1", "d2", "d3"} {
		req := c.request(key, "a")
		req.MaxElapsed = maxElapsed
		began := time.Now()
		res := c.acquire(t, s, req)
		if !res.Acquired || res.Elapsed < 0 || res.Elapsed > maxElapsed {
			t.Fatalf("Acquire of free key %q with MaxElapsed %v = %+v; want granted, Elapsed in [0, %v]", key, maxElapsed, res, maxElapsed)
		}
		h := c.mustBeRefused(t, s, key, "b")
		// A unit of slack: the time the calls took, and stores that count
		// time left in whole units.
		if promised := c.ttl - res.Elapsed - time.Since(began) - c.unit; h.TimeLeft < promised {
			t.Errorf("term of %q dated back by %v has %v left, less than the %v it promised", key, res.Elapsed, h.TimeLeft, promised)
		}
	}
}
