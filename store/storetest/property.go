package storetest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// seedEnv names the variable that replays a randomized run with its seed.
const seedEnv = "TENURE_STORETEST_SEED"

// testRandomOperationsKeepEveryGuarantee drives a store with random
// acquisitions, renewals, releases, pauses and the passage of time from a
// few owners over a few keys, and checks every answer against a model of
// what the store has told them:
//
//   - epochs of a key strictly increase across grants;
//   - no owner is granted a key while another owner's term may still be
//     live or within grace, judged from that owner's last confirmed grant
//     or renewal (the store stamped expiry no earlier than its send time +
//     ttl);
//   - a released or never-used key is granted at once, a key whose term
//     certainly expired grace ago is granted, a certainly live term of the
//     caller's is renewed, and any other term is never renewed;
//   - a refusal names the current holder; List agrees with the model.
//
// Answers near a boundary (within the tolerance of an expiry) may go either
// way and are not judged.
func (c *suite) testRandomOperationsKeepEveryGuarantee(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv(seedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, v, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, seedEnv, seed)

	m := &model{
		c:       c,
		s:       c.fresh(t),
		rng:     rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>1|1)),
		instant: c.h.InstantAdvance,
		began:   time.Now(),
		slack:   max(c.tol, time.Millisecond),
		// Shorter than elsewhere, so terms expire and are taken over
		// several times within the few seconds a real server runs.
		ttl:      2 * c.unit,
		grace:    c.unit,
		cur:      map[string]*modelTerm{},
		maxEpoch: map[string]int64{},
		held:     map[string]map[string]int64{},
		paused:   map[string]time.Duration{},
		shared:   c.h.SharedExpiry,
		touched:  map[string]time.Duration{},
	}
	for i := range 6 {
		m.owners = append(m.owners, fmt.Sprintf("owner-%d", i))
		m.held[m.owners[i]] = map[string]int64{}
	}
	for i := range 8 {
		m.keys = append(m.keys, fmt.Sprintf("prop/%d", i))
	}
	n := c.h.Operations
	if n <= 0 {
		n = 1000
		if m.instant {
			n = 2000
		}
	}
	for m.step = 0; m.step < n && !t.Failed(); m.step++ {
		m.randomStep(t)
	}
	m.checkList(t)
	if t.Failed() {
		t.Logf("stopped at step %d of %d; last steps:\n%s", m.step, n, m.history())
		t.Logf("replay with %s=%d", seedEnv, seed)
		return
	}
	t.Logf("%d steps over %v of store time: %+v", n, m.now(), m.stats)
}

// model is what the store has told the owners, on the suite's clock.
type model struct {
	c       *suite
	s       store.Store
	rng     *rand.Rand
	instant bool
	began   time.Time
	// advanced is the store time let pass by Advance; with an instant
	// clock it is the whole of the store's time.
	advanced   time.Duration
	slack      time.Duration
	ttl, grace time.Duration

	owners, keys []string
	cur          map[string]*modelTerm       // key → its current term; nil when never acquired
	maxEpoch     map[string]int64            // key → highest epoch seen
	held         map[string]map[string]int64 // owner → key → epoch it believes it holds
	paused       map[string]time.Duration    // owner → time until which it does nothing
	// touched is, with Harness.SharedExpiry, when each owner last sent a
	// call that may have extended all of its terms.
	shared  bool
	touched map[string]time.Duration

	step  int
	log   []string // recent steps, for the failure message
	stats struct{ Granted, Refused, Takeovers, Renewed, Lost, Released, Lists int }
}

// modelTerm is one granted term. sent and recv bracket its last confirmed
// grant or renewal: the store stamped expiry in [sent+ttl, recv+ttl].
type modelTerm struct {
	owner      string
	epoch      int64
	released   bool
	running    bool // as last reported by a grant or renewal
	sent, recv time.Duration
}

func (m *model) now() time.Duration {
	if m.instant {
		return m.advanced
	}
	return time.Since(m.began)
}

func (m *model) note(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("%5d @%v ", m.step, m.now().Round(time.Millisecond))+fmt.Sprintf(format, args...))
	if len(m.log) > 40 {
		m.log = m.log[1:]
	}
}

func (m *model) history() string {
	var b []byte
	for _, l := range m.log {
		b = append(b, "    "+l+"\n"...)
	}
	return string(b)
}

// certainlyLive reports whether tm's expiry is certainly after the call
// that ended at recv; certainlyExpired whether it is certainly before the
// call that began at sent, plus extra.
func (m *model) certainlyLive(tm *modelTerm, recv, extra time.Duration) bool {
	return recv < tm.sent+m.ttl+extra-m.slack
}

func (m *model) certainlyExpired(tm *modelTerm, sent, extra time.Duration) bool {
	return sent > tm.recv+m.ttl+extra+m.slack
}

// mayBeExtended reports whether tm's owner sent a call after tm's last
// confirmation that, on a store with shared expiry, may have extended it.
func (m *model) mayBeExtended(tm *modelTerm) bool {
	return m.shared && m.touched[tm.owner] > tm.sent
}

func (m *model) randomStep(t *testing.T) {
	o := m.owners[m.rng.IntN(len(m.owners))]
	r := m.rng.IntN(100)
	if r < 79 && m.paused[o] > m.now() {
		return // a paused owner does nothing; its terms run out
	}
	switch {
	case r < 30:
		m.acquire(t, o, m.keys[m.rng.IntN(len(m.keys))])
	case r < 60:
		m.renew(t, o)
	case r < 72:
		m.release(t, o)
	case r < 76:
		m.checkList(t)
	case r < 79:
		d := time.Duration(m.rng.Int64N(int64(m.ttl + m.grace + 2*m.c.unit)))
		m.paused[o] = m.now() + d
		m.note("%s pauses for %v", o, d)
	default:
		m.advance(t)
	}
}

func (m *model) advance(t *testing.T) {
	// A real server's clock costs wall time: keep its steps small.
	limit := m.c.unit / 8
	if m.instant {
		limit = m.c.unit / 2
	}
	d := time.Duration(m.rng.Int64N(int64(limit)) + 1)
	m.c.advance(t, m.s, d)
	m.advanced += d
	m.note("advance %v", d)
}

func (m *model) acquire(t *testing.T, o, k string) {
	req := store.AcquireRequest{Key: k, Owner: o, TTL: m.ttl, Grace: m.grace, Running: m.rng.IntN(2) == 0}
	sent := m.now()
	m.touched[o] = sent
	res := m.c.acquire(t, m.s, req)
	recv := m.now()
	if res.Acquired {
		m.note("%s acquires %s: epoch %d", o, k, res.Epoch)
	} else {
		m.note("%s acquires %s: refused by %s", o, k, fmtLease(res.Holder))
	}

	cur := m.cur[k]
	var must, why string
	switch {
	case cur == nil:
		must, why = "granted", "the key was never acquired"
	case cur.released:
		must, why = "granted", fmt.Sprintf("%s released epoch %d", cur.owner, cur.epoch)
	case cur.owner == o:
		if m.certainlyLive(cur, recv, 0) {
			must, why = "granted", fmt.Sprintf("its own term (epoch %d) is live", cur.epoch)
		}
	case m.certainlyLive(cur, recv, m.grace):
		must, why = "refused", fmt.Sprintf("%s's term (epoch %d, confirmed at %v…%v) is live or within grace", cur.owner, cur.epoch, cur.sent, cur.recv)
	case m.certainlyExpired(cur, sent, m.grace) && !m.mayBeExtended(cur):
		must, why = "granted", fmt.Sprintf("%s's term (epoch %d, confirmed at %v…%v) expired grace ago", cur.owner, cur.epoch, cur.sent, cur.recv)
	}

	if !res.Acquired {
		m.stats.Refused++
		if must == "granted" {
			t.Errorf("step %d: %s was refused %s although %s", m.step, o, k, why)
		} else if cur != nil && (res.Holder.Key != k || res.Holder.Owner != cur.owner || res.Holder.Epoch != cur.epoch) {
			t.Errorf("step %d: %s was refused %s by %s; the current term is %s's epoch %d", m.step, o, k, fmtLease(res.Holder), cur.owner, cur.epoch)
		}
		return
	}
	m.stats.Granted++
	if must == "refused" {
		t.Errorf("step %d: %s was granted %s (epoch %d) although %s", m.step, o, k, res.Epoch, why)
	}
	if res.Epoch <= m.maxEpoch[k] {
		t.Errorf("step %d: %s was granted %s with epoch %d, not above the highest earlier epoch %d", m.step, o, k, res.Epoch, m.maxEpoch[k])
	}
	if cur != nil && cur.owner != o && !cur.released {
		m.stats.Takeovers++
	}
	m.maxEpoch[k] = max(m.maxEpoch[k], res.Epoch)
	m.cur[k] = &modelTerm{owner: o, epoch: res.Epoch, running: req.Running, sent: sent, recv: recv}
	m.held[o][k] = res.Epoch
}

// renew renews every term o believes it holds, sometimes with a term it
// does not hold mixed in.
func (m *model) renew(t *testing.T, o string) {
	var items []store.RenewItem
	for _, k := range sortedKeys(m.held[o]) {
		items = append(items, store.RenewItem{Key: k, Epoch: m.held[o][k], Running: m.rng.IntN(2) == 0})
	}
	if m.rng.IntN(4) == 0 {
		items = slices.Insert(items, m.rng.IntN(len(items)+1), m.stranger())
	}
	if len(items) == 0 {
		return
	}
	sent := m.now()
	m.touched[o] = sent
	ok := m.c.renewFor(t, m.s, o, m.ttl, items...)
	recv := m.now()
	m.note("%s renews %v: %v", o, items, ok)

	for i, it := range items {
		cur := m.cur[it.Key]
		current := cur != nil && cur.owner == o && cur.epoch == it.Epoch && !cur.released
		switch {
		case ok[i] && !current:
			t.Errorf("step %d: %s renewed %s epoch %d, which is not its current term (current: %s)", m.step, o, it.Key, it.Epoch, fmtTerm(cur))
		case ok[i]:
			m.stats.Renewed++
			cur.sent, cur.recv, cur.running = sent, recv, it.Running
		case current && m.certainlyLive(cur, recv, 0):
			t.Errorf("step %d: renewal of %s epoch %d by %s was refused although it was live (confirmed at %v…%v, ttl %v)", m.step, it.Key, it.Epoch, o, cur.sent, cur.recv, m.ttl)
		default:
			m.stats.Lost++
			if m.held[o][it.Key] == it.Epoch {
				delete(m.held[o], it.Key)
			}
		}
	}
}

// stranger is a term the owner does not hold: an older or newer epoch of a
// key, or a key nobody acquired.
func (m *model) stranger() store.RenewItem {
	k := m.keys[m.rng.IntN(len(m.keys))]
	switch m.rng.IntN(3) {
	case 0:
		return store.RenewItem{Key: k, Epoch: m.maxEpoch[k] - 1}
	case 1:
		return store.RenewItem{Key: k, Epoch: m.maxEpoch[k] + 1}
	default:
		return store.RenewItem{Key: "prop/unknown", Epoch: 1}
	}
}

// release ends some of o's terms and then, sometimes, has a peer take one
// at once: a released key must be free without grace.
func (m *model) release(t *testing.T, o string) {
	var terms []store.Term
	for _, k := range sortedKeys(m.held[o]) {
		if m.rng.IntN(2) == 0 {
			terms = append(terms, store.Term{Key: k, Epoch: m.held[o][k]})
		}
	}
	if m.rng.IntN(4) == 0 {
		st := m.stranger()
		terms = append(terms, store.Term{Key: st.Key, Epoch: st.Epoch})
	}
	if len(terms) == 0 {
		return
	}
	m.c.release(t, m.s, o, terms...)
	m.note("%s releases %v", o, terms)
	var freed []string
	for _, tm := range terms {
		if cur := m.cur[tm.Key]; cur != nil && cur.owner == o && cur.epoch == tm.Epoch && !cur.released {
			cur.released = true
			freed = append(freed, tm.Key)
			m.stats.Released++
		}
		if m.held[o][tm.Key] == tm.Epoch {
			delete(m.held[o], tm.Key)
		}
	}
	if len(freed) > 0 && m.rng.IntN(2) == 0 {
		peer := m.owners[m.rng.IntN(len(m.owners))]
		m.acquire(t, peer, freed[m.rng.IntN(len(freed))])
	}
}

// checkList compares List with the model.
func (m *model) checkList(t *testing.T) {
	m.stats.Lists++
	sent := m.now()
	ls := m.c.list(t, m.s, "")
	recv := m.now()
	m.note("list: %d records", len(ls))
	if !slices.IsSortedFunc(ls, func(a, b store.Lease) int { return strings.Compare(a.Key, b.Key) }) {
		t.Errorf("step %d: List is not sorted by key: %q", m.step, leaseKeys(ls))
	}
	seen := map[string]bool{}
	for _, l := range ls {
		seen[l.Key] = true
		cur := m.cur[l.Key]
		if cur == nil {
			t.Errorf("step %d: List shows %s, which was never acquired", m.step, fmtLease(l))
			continue
		}
		if l.Owner != cur.owner || l.Epoch != cur.epoch || l.Released != cur.released || (!cur.released && l.Running != cur.running) {
			t.Errorf("step %d: List shows %s; the current term is %s", m.step, fmtLease(l), fmtTerm(cur))
		}
		switch {
		case l.Live && cur.released:
			t.Errorf("step %d: List shows released %s as live", m.step, fmtLease(l))
		case !l.Live && !cur.released && m.certainlyLive(cur, recv, 0):
			t.Errorf("step %d: List shows %s as not live; confirmed at %v…%v with ttl %v", m.step, fmtLease(l), cur.sent, cur.recv, m.ttl)
		case l.Live && m.certainlyExpired(cur, sent, 0) && !m.mayBeExtended(cur):
			t.Errorf("step %d: List shows %s as live; confirmed at %v…%v with ttl %v", m.step, fmtLease(l), cur.sent, cur.recv, m.ttl)
		}
	}
	for k := range m.cur {
		if !seen[k] {
			t.Errorf("step %d: List lacks %s, current term %s", m.step, k, fmtTerm(m.cur[k]))
		}
	}
}

func fmtTerm(tm *modelTerm) string {
	if tm == nil {
		return "none"
	}
	return fmt.Sprintf("{owner %q epoch %d released %t running %t confirmed %v…%v}", tm.owner, tm.epoch, tm.released, tm.running, tm.sent, tm.recv)
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
