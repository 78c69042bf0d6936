package redis

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

var sessions = sessiontest.Harness{
	Open: func(t *testing.T) sessiontest.Store { return newTestStore(t) },
	Another: func(t *testing.T, s sessiontest.Store) sessiontest.Store {
		other, err := New(s.(*Store).client, Options{Namespace: s.(*Store).namespace})
		if err != nil {
			t.Fatal(err)
		}
		return other
	},
	SlowRenewals: slowRenewals.Load,
	SessionOf: func(t *testing.T, st sessiontest.Store, key string) int64 {
		_, expiry := rawRecord(t, st.(*Store), key)
		if expiry < onSession {
			return 0
		}
		return expiry - onSession
	},
	Sessions: func(t *testing.T, st sessiontest.Store) int {
		s := st.(*Store)
		n, err := s.client.HLen(testenv.Context(t), s.keys[2]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	},
}

func TestSessions(t *testing.T) { sessiontest.Run(t, sessions) }

// rawRecord reads key's packed record as it is stored, and its expiry.
func rawRecord(t *testing.T, s *Store, key string) (string, int64) {
	t.Helper()
	rec, err := s.client.HGet(testenv.Context(t), s.keys[0], key).Result()
	if err != nil {
		t.Fatalf("HGET %q: %v", key, err)
	}
	f := strings.SplitN(rec, ",", 5)
	expiry, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("record %q: %v", rec, err)
	}
	return rec, expiry
}

func TestTheScriptsAndGoAgreeWhereSessionsBegin(t *testing.T) {
	if strconv.FormatInt(onSession, 10) != onSessionLua {
		t.Fatalf("onSession %d, the scripts' on_session %s", onSession, onSessionLua)
	}
	if begins := time.UnixMicro(onSession).UTC(); begins != time.Date(2126, 1, 1, 0, 0, 0, 0, time.UTC) {
		t.Fatalf("onSession is %v", begins)
	}
}

// A version of this package without sessions reads a record on a session
// as its own: a term live for a century, which it never takes over.
func TestARecordOnASessionIsLiveToAVersionWithoutSessions(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	k := sessiontest.Acquire(t, s, "k", "a", time.Second)
	if _, err := s.Renew(ctx, "a", time.Second, []store.RenewItem{{Key: "k", Epoch: k.Epoch, Running: true}}); err != nil {
		t.Fatal(err)
	}
	rec, _ := rawRecord(t, s, "k")
	old, err := decodeRecord("k", rec, time.Now().UnixMicro(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !old.Live || old.TimeLeft < 50*365*24*time.Hour || old.Owner != "a" || old.Epoch != k.Epoch {
		t.Fatalf("an older version reads %+v; want a's term, live for decades", old)
	}
	if l := sessiontest.LeaseOf(t, s, "k"); !l.Live || l.TimeLeft > time.Second {
		t.Fatalf("this version lists %+v; want live within its session's TTL", l)
	}
}

// Two renewals of one owner: the later leaves k2 out, after the earlier
// promised it a TTL. k2 must keep that promise — it stays on the session
// the earlier renewal extended, which is renewed no more — or a peer could
// take it while its holder still runs.
func TestATermLeftOutKeepsWhatAnotherRenewalPromisedIt(t *testing.T) {
	s := newTestStore(t)
	const ttl = time.Minute
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)
	promised := time.Now().Add(ttl)
	if got, slow := sessions.Renew(t, s, "a", ttl, k1, k2); slow || !got[0] || !got[1] {
		t.Fatalf("renewal of both: %v, slow %t", got, slow)
	}
	if got, slow := sessions.Renew(t, s, "a", ttl, k1); !slow || !got[0] {
		t.Fatalf("renewal of k1 alone: %v, slow %t; want renewed, term by term", got, slow)
	}
	l := sessiontest.LeaseOf(t, s, "k2")
	if ends := time.Now().Add(l.TimeLeft); !l.Live || ends.Before(promised) {
		t.Fatalf("k2 after the renewal that left it out: %+v, ends %v before the %v promised", l, promised.Sub(ends), promised)
	}
	if sessions.SessionOf(t, s, "k2") == sessions.SessionOf(t, s, "k1") {
		t.Fatal("k2 is still on the session a renews")
	}
}

// A version without sessions revokes a term on one by giving its record a
// new epoch and no owner, keeping the expiry — which points at the
// session. Nothing moves the session's version, so only a renewal term by
// term tells the holder; one comes at least every fullRenewalEvery.
func TestARevocationByAVersionWithoutSessionsReachesTheHolder(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k, other := sessiontest.Acquire(t, s, "k", "a", ttl), sessiontest.Acquire(t, s, "other", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k, other)
	rec, _ := rawRecord(t, s, "k")
	f := strings.SplitN(rec, ",", 5)
	revoked := strconv.FormatInt(k.Epoch+1, 10) + "," + f[1] + ",0,0,"
	if err := s.client.HSet(ctx, s.keys[0], "k", revoked).Err(); err != nil {
		t.Fatal(err)
	}
	defer func(every time.Duration) { fullRenewalEvery = every }(fullRenewalEvery)
	fullRenewalEvery = 0
	if got, slow := sessions.Renew(t, s, "a", ttl, k, other); !slow || got[0] || !got[1] {
		t.Fatalf("renewal after the revocation: %v, slow %t; want [false true], term by term", got, slow)
	}
	l := sessiontest.LeaseOf(t, s, "k")
	if l.Live || l.Owner != "" || l.TimeLeft <= 0 || l.TimeLeft > ttl {
		t.Fatalf("the revoked term: %+v; want no owner, not live, blocking peers for what its session had left", l)
	}
}

// A session only a hand or an eviction can remove: a record on it cannot
// say when its term ends. A peer's acquisition gives it an end a TTL from
// then, and is refused until that end + grace; the holder's next renewal
// finds it on its own record and puts it on a new session.
func TestATermWhoseSessionIsGoneEndsATTLLater(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k := sessiontest.Acquire(t, s, "k", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k)
	id := sessions.SessionOf(t, s, "k")
	if err := s.client.HDel(ctx, s.keys[2], strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "b", TTL: ttl, Grace: time.Second})
	if err != nil || res.Acquired || !res.Holder.Live || res.Holder.Owner != "a" || res.Holder.TimeLeft < ttl-5*time.Second {
		t.Fatalf("b's acquisition of k, its session gone: %+v %v; want refused, a's term live about a TTL", res, err)
	}
	if got, _ := sessions.Renew(t, s, "a", ttl, k); !got[0] {
		t.Fatalf("a's renewal of k: %v; want renewed", got)
	}
	if on := sessions.SessionOf(t, s, "k"); on == 0 || on == id {
		t.Fatalf("k is on session %d after a's renewal; want a new one", on)
	}
}

// A renewal term by term of more terms than one script call takes goes in
// several calls, one round trip; the renewal after it is on the session
// alone.
func TestARenewalOfManyTermsGoesInCallsOfMaxBatch(t *testing.T) {
	s := newTestStore(t)
	const ttl = time.Minute
	n := 2*maxBatch + 10
	terms := make([]store.Term, n)
	for i := range terms {
		terms[i] = sessiontest.Acquire(t, s, "k"+strconv.Itoa(i), "a", ttl)
	}
	if got, slow := sessions.Renew(t, s, "a", ttl, terms...); !slow || slices.Contains(got, false) {
		t.Fatalf("first renewal of %d terms acquired: slow %t, %d lost; want term by term, every one renewed", n, slow, n-countTrue(got))
	}
	if on := sessions.SessionOf(t, s, "k0"); on == 0 || on != sessions.SessionOf(t, s, "k"+strconv.Itoa(n-1)) {
		t.Fatalf("the first and last terms are on sessions %d and %d; want one", on, sessions.SessionOf(t, s, "k"+strconv.Itoa(n-1)))
	}
	if got, slow := sessions.Renew(t, s, "a", ttl, terms...); slow || slices.Contains(got, false) {
		t.Fatalf("next renewal: slow %t, %d lost; want on the session alone, every one renewed", slow, n-countTrue(got))
	}
}

func countTrue(bs []bool) (n int) {
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// A renewal on the session alone, checked before an overlapping renewal
// term by term moved the term it joins onto another session of the
// owner, finds the term there: it is the owner's and live, so it is put
// on and answered renewed, not lost.
func TestAJoinFindsItsTermOnAnotherSessionOfItsOwner(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k := sessiontest.Acquire(t, s, "k", "a", ttl) // opens a's session, k pending
	items := []store.RenewItem{{Key: "k", Epoch: k.Epoch}}
	f, ok := s.book.Check("a", ttl, items) // renewal 1: fast, to join k
	if !ok || len(f.Join) != 1 {
		t.Fatalf("check: %+v %t", f, ok)
	}
	// Renewal 2, overlapping, goes term by term (its minute was up).
	defer func(every time.Duration) { fullRenewalEvery = every }(fullRenewalEvery)
	fullRenewalEvery = 0
	if got, err := s.Renew(ctx, "a", ttl, items); err != nil || !got[0] {
		t.Fatalf("renewal 2: %v %v", got, err)
	}
	renewed, done, err := s.renewFast(ctx, "a", ttl, f, items)
	if err != nil || !done {
		t.Fatalf("renewal 1: done %t, %v", done, err)
	}
	if l := sessiontest.LeaseOf(t, s, "k"); !l.Live || l.Owner != "a" || l.Epoch != k.Epoch {
		t.Fatalf("k: %+v", l)
	}
	if renewed != nil && !renewed[store.Term{Key: "k", Epoch: k.Epoch}] {
		t.Errorf("renewal 1 answers k lost, though k is a's, live on a's session %d", sessions.SessionOf(t, s, "k"))
	}
	if on := sessions.SessionOf(t, s, "k"); on != f.ID {
		t.Errorf("k is on session %d; want renewal 1's, %d", on, f.ID)
	}
}

// List hands the client every session with each page while there are a
// thousand or fewer, and only the sessions the page's records are on when
// there are more: either way a record on a session reads as its
// session's end, not as the century its record holds.
func TestListReadsEachRecordAsItsSessionEndsWhateverTheSessions(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k := sessiontest.Acquire(t, s, "k", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k)
	check := func(when string) {
		t.Helper()
		if l := sessiontest.LeaseOf(t, s, "k"); !l.Live || l.TimeLeft > ttl || l.TimeLeft < ttl-10*time.Second {
			t.Fatalf("k with %s: %+v; want live for its session's TTL", when, l)
		}
	}
	check("one session")
	if _, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for range 1000 {
			openSessionScript.EvalSha(ctx, p, s.keys, newSessionID(), "idle", micros(ttl), newTag())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.client.HLen(ctx, s.keys[2]).Result(); err != nil || n <= 1000 {
		t.Fatalf("%d sessions, %v; want more than 1000", n, err)
	}
	check("1,001 sessions")
}
