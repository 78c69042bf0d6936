package redis

// A property test of sessions: owners on several Stores (two of one
// owner) acquire, renew (overlapping, and term by term every few hundred
// milliseconds), release, give up terms, revoke and prune at random for a
// few seconds, with short TTLs; every promise a call made (a term live
// until the call's start + TTL) is checked against every peer's
// acquisition, and at the end each session's count of records against
// the records on it.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// stressTTL is the TTL of every term of the stress tests.
const stressTTL = 250 * time.Millisecond

// promiseKey is a term of an owner.
type promiseKey struct {
	key   string
	epoch int64
	owner string
}

// stressLog records, on the shared wall clock of this host and the test
// Redis, every promise a store made (a term live until call start + TTL)
// and checks each acquisition by another owner against them.
type stressLog struct {
	mu       sync.Mutex
	promised map[promiseKey]time.Time
	released map[promiseKey]bool
	// newest is the highest epoch each owner acquired of each key: a term
	// of an owner below it was superseded by that owner (rule 1), and
	// promises nothing more. It is kept apart from released because the
	// two acquisitions may be logged in either order: two Stores of one
	// owner race, and the later grant's goroutine may log first.
	newest map[ownedKey]int64
	bad    []string
	calls  []stressCall
}

// ownedKey is a key as one owner holds it.
type ownedKey struct{ key, owner string }

func newStressLog() *stressLog {
	return &stressLog{promised: map[promiseKey]time.Time{}, released: map[promiseKey]bool{}, newest: map[ownedKey]int64{}}
}

// stressCall is one store call of the test, kept so that a broken
// promise can show every call on its key around it.
type stressCall struct {
	start, end time.Time
	owner, op  string
	key        string // "" for a call on every key (Prune)
	epoch      int64
	result     string
}

// call records a store call.
func (l *stressLog) call(c stressCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

// trail returns the calls on key (and on every key) that ended after
// from, one per line.
func (l *stressLog) trail(key string, from time.Time) string {
	var b strings.Builder
	for _, c := range l.calls {
		if (c.key == key || c.key == "") && c.end.After(from) {
			fmt.Fprintf(&b, "\n\t%s–%s %s %s %q epoch %d: %s", c.start.Format("05.000000"), c.end.Format("05.000000"),
				c.owner, c.op, c.key, c.epoch, c.result)
		}
	}
	return b.String()
}

func (l *stressLog) promise(k promiseKey, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.promised[k]) {
		l.promised[k] = until
	}
}

func (l *stressLog) release(k promiseKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released[k] = true
}

// acquired checks an acquisition of key by owner, answered at, against
// every promise another owner's term still holds.
func (l *stressLog) acquired(key, owner string, epoch int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok := (ownedKey{key, owner}); epoch > l.newest[ok] {
		l.newest[ok] = epoch
	}
	for k, until := range l.promised {
		if k.key != key || k.owner == owner || l.released[k] || k.epoch < l.newest[ownedKey{k.key, k.owner}] {
			continue
		}
		if at.Add(time.Millisecond).Before(until) {
			l.bad = append(l.bad, fmt.Sprintf("%s acquired %q (epoch %d) at %v, %v before %s's term %d was promised to end; the calls on it:%s",
				owner, key, epoch, at.Format("15:04:05.000000"), until.Sub(at), k.owner, k.epoch, l.trail(key, until.Add(-2*stressTTL))))
		}
	}
}

// TestTheStressLogForgetsTermsTheirOwnerSuperseded checks the checker: a
// term its owner superseded by acquiring the key again promises nothing,
// whichever acquisition was logged first (two Stores of one owner race,
// and the later grant may be logged first); a term nobody superseded
// still promises its end.
func TestTheStressLogForgetsTermsTheirOwnerSuperseded(t *testing.T) {
	t0 := time.Now()
	grant := func(log *stressLog, owner string, epoch int64) {
		log.acquired("k", owner, epoch, t0)
		log.promise(promiseKey{"k", epoch, owner}, t0.Add(time.Second))
	}
	for _, laterLoggedFirst := range []bool{false, true} {
		log := newStressLog()
		if laterLoggedFirst {
			grant(log, "a", 2)
			grant(log, "a", 1)
		} else {
			grant(log, "a", 1)
			grant(log, "a", 2)
		}
		log.release(promiseKey{"k", 2, "a"})
		log.acquired("k", "b", 3, t0.Add(10*time.Millisecond))
		if len(log.bad) != 0 {
			t.Errorf("later grant logged first %v: %q", laterLoggedFirst, log.bad)
		}
	}
	log := newStressLog()
	grant(log, "a", 1)
	log.acquired("k", "b", 2, t0.Add(10*time.Millisecond))
	if len(log.bad) != 1 {
		t.Errorf("a live term taken over: %q, want one broken promise", log.bad)
	}
}

// TestSessionsKeepEveryPromise runs owners on several Stores (two of one
// owner), overlapping renewals, releases, revocations, abandoned terms,
// prunes and term-by-term renewals, and checks that no peer ever acquires
// a key before a term's promised end.
func TestSessionsKeepEveryPromise(t *testing.T) { stressPromises(t, false) }

// TestSessionsKeepEveryPromiseThoughRepliesAreLost is the same with a third of the
// calls cut short by their context: replies lost, scripts run or not.
func TestSessionsKeepEveryPromiseThoughRepliesAreLost(t *testing.T) { stressPromises(t, true) }

func stressPromises(t *testing.T, cut bool) {
	base := newTestStore(t)
	ctx := testenv.Context(t)
	open := func() *Store {
		s, err := New(base.client, Options{Namespace: base.namespace})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	defer func(every time.Duration) { fullRenewalEvery = every }(fullRenewalEvery)
	fullRenewalEvery = 300 * time.Millisecond

	const ttl, grace = stressTTL, 10 * time.Millisecond
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	log := newStressLog()
	end := time.Now().Add(4 * time.Second)

	type worker struct {
		owner string
		s     *Store
	}
	workers := []worker{{"a", base}, {"a", open()}, {"b", open()}, {"c", open()}}
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var errs []error
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	for wi, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(wi), uint64(time.Now().UnixNano())))
			name := w.owner + strconv.Itoa(wi) // owner and Store, for the trail
			fail := fail
			if cut {
				fail = func(error) {}
			}
			// call is the context of one store call: with cut, a third
			// of them end within 2ms.
			call := func() (context.Context, context.CancelFunc) {
				if cut && rand.IntN(3) == 0 {
					return context.WithTimeout(ctx, time.Duration(rand.IntN(2000))*time.Microsecond)
				}
				return context.WithCancel(ctx)
			}
			var mu sync.Mutex
			held := map[string]int64{}
			snapshot := func() []store.RenewItem {
				mu.Lock()
				defer mu.Unlock()
				var items []store.RenewItem
				for k, e := range held {
					items = append(items, store.RenewItem{Key: k, Epoch: e, Running: rand.IntN(4) == 0})
				}
				return items
			}
			renew := func() {
				items := snapshot()
				if len(items) == 0 {
					return
				}
				start := time.Now()
				cctx, cancel := call()
				defer cancel()
				ok, err := w.s.Renew(cctx, w.owner, ttl, items)
				for i, it := range items {
					result := fmt.Sprint(err)
					if err == nil {
						result = fmt.Sprint(ok[i])
					}
					log.call(stressCall{start, time.Now(), name, "renew", it.Key, it.Epoch, result})
				}
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for i, it := range items {
					if ok[i] {
						log.promise(promiseKey{it.Key, it.Epoch, w.owner}, start.Add(ttl))
					} else if held[it.Key] == it.Epoch {
						delete(held, it.Key)
					}
				}
			}
			for time.Now().Before(end) {
				switch op := r.IntN(10); {
				case op < 3:
					key := keys[r.IntN(len(keys))]
					start := time.Now()
					cctx, cancel := call()
					res, err := w.s.Acquire(cctx, store.AcquireRequest{Key: key, Owner: w.owner, TTL: ttl, Grace: grace})
					cancel()
					log.call(stressCall{start, time.Now(), name, "acquire", key, res.Epoch, fmt.Sprintf("%+v %v", res, err)})
					if err != nil {
						fail(err)
						continue
					}
					if res.Acquired {
						log.acquired(key, w.owner, res.Epoch, time.Now())
						log.promise(promiseKey{key, res.Epoch, w.owner}, start.Add(ttl))
						mu.Lock()
						held[key] = res.Epoch
						mu.Unlock()
					}
				case op < 7:
					if r.IntN(3) == 0 {
						wg.Go(renew) // overlapping renewals
					} else {
						renew()
					}
				case op < 8:
					mu.Lock()
					for k, e := range held {
						log.release(promiseKey{k, e, w.owner})
						delete(held, k)
						mu.Unlock()
						start := time.Now()
						err := w.s.Release(context.Background(), w.owner, []store.Term{{Key: k, Epoch: e}})
						log.call(stressCall{start, time.Now(), name, "release", k, e, fmt.Sprint(err)})
						if err != nil {
							fail(err)
						}
						mu.Lock()
						break
					}
					mu.Unlock()
				case op < 9:
					mu.Lock()
					for k := range held {
						delete(held, k) // gave up without a release
						break
					}
					mu.Unlock()
				default:
					if r.IntN(4) == 0 {
						key, start := keys[r.IntN(len(keys))], time.Now()
						revoked, err := w.s.Revoke(ctx, key)
						log.call(stressCall{start, time.Now(), name, "revoke", key, 0, fmt.Sprint(revoked, err)})
						if err != nil {
							fail(err)
						}
					} else if r.IntN(3) == 0 {
						start := time.Now()
						n, err := w.s.Prune(ctx, "", grace+time.Millisecond)
						log.call(stressCall{start, time.Now(), name, "prune", "", 0, fmt.Sprint(n, err)})
						if err != nil {
							fail(err)
						}
					}
				}
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, b := range log.bad {
		t.Error(b)
	}
	t.Logf("%d promises, %d slow renewals so far", len(log.promised), slowRenewals.Load())
	checkCounts(t, base)
	// Nobody renews any more: every key frees within a TTL and grace.
	time.Sleep(2*ttl + grace)
	for _, key := range keys {
		res, err := base.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "z", TTL: ttl, Grace: grace})
		if err != nil || !res.Acquired {
			t.Errorf("%q after every holder stopped: %+v %v", key, res, err)
		}
	}
}

// checkCounts compares each session's records count with the records on
// it.
func checkCounts(t *testing.T, s *Store) {
	t.Helper()
	ctx := testenv.Context(t)
	recs, err := s.client.HGetAll(ctx, s.keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	on := map[int64]int{}
	for k := range recs {
		if k == "" || k[0] == 0 {
			continue
		}
		_, x := rawRecord(t, s, k)
		if x >= onSession {
			on[x-onSession]++
		}
	}
	sess, err := s.client.HGetAll(ctx, s.keys[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range on {
		v, ok := sess[strconv.FormatInt(id, 10)]
		if !ok {
			t.Errorf("%d records on session %d, which is gone", n, id)
			continue
		}
		var x, ver, tag, prev, c int64
		var owner string
		if _, err := fmt.Sscanf(v, "%d,%d,%d,%d,%d,%s", &x, &ver, &tag, &prev, &c, &owner); err != nil {
			t.Fatalf("session %q: %v", v, err)
		}
		if c != int64(n) {
			t.Errorf("session %d counts %d records, %d are on it", id, c, n)
		}
	}
}
