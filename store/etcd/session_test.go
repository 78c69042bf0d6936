package etcd

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// clientWith returns a client of the test etcd with extra dial options
// (interceptors), closed when the test ends.
func clientWith(t testing.TB, opts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	cfg, _, err := parseURL(testenv.Etcd.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = zap.NewNop()
	cfg.DialOptions = append(cfg.DialOptions, opts...)
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// countingStore opens a store whose client counts the calls it sends to
// etcd: unary calls and streams (a keep-alive is a stream of its own).
func countingStore(t testing.TB) (*Store, *atomic.Int64) {
	t.Helper()
	calls := new(atomic.Int64)
	c := clientWith(t,
		grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				calls.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
		grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				calls.Add(1)
				return streamer(ctx, desc, cc, method, opts...)
			}))
	return storeOn(t, c), calls
}

// storeOn opens a store on c in a namespace of its own, dropped when the
// test ends.
func storeOn(t testing.TB, c *clientv3.Client) *Store {
	t.Helper()
	prefix := randomPrefix()
	t.Cleanup(func() { dropNamespace(t, prefix) })
	s, err := New(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acquireAll acquires keys "k0000"… for owner and returns them as renewal
// items.
func acquireAll(t *testing.T, s *Store, owner string, n int, ttl, grace time.Duration) []store.RenewItem {
	t.Helper()
	items := make([]store.RenewItem, n)
	for i := range items {
		key := fmt.Sprintf("k%04d", i)
		items[i] = store.RenewItem{Key: key, Epoch: testenv.MustAcquire(t, s, key, owner, ttl, grace), Running: true}
	}
	return items
}

// One keep-alive per process: however many terms an owner holds, a
// renewal is a TimeToLive and a keep-alive of its session, and it writes
// nothing.
func TestARenewalCostsTwoCallsWhateverTheNumberOfTerms(t *testing.T) {
	s, calls := countingStore(t)
	items := acquireAll(t, s, "a", 300, time.Minute, time.Second)
	lease := leaseOf(t, s, s.liveKey("k0000"))
	for _, it := range items {
		if got := leaseOf(t, s, s.liveKey(it.Key)); got != lease {
			t.Fatalf("%s is on lease %x, k0000 on %x: an owner's terms share one session", it.Key, got, lease)
		}
		if got := leaseOf(t, s, s.graceKey(it.Key)); got != 0 {
			t.Fatalf("%s has a grace key on lease %x; a term on a session needs none", it.Key, got)
		}
	}
	if got := grantedTTL(t, s, lease); got != 61 {
		t.Errorf("the session was granted %ds, want the ttl + grace, 61s", got)
	}
	before := revision(t, s)
	for n := 1; n <= 3; n++ {
		from := calls.Load()
		if ok := testenv.Renew(t, s, "a", time.Minute, items...); slices.Contains(ok, false) {
			t.Fatalf("renewal %d = %v, want all renewed", n, ok)
		}
		if got := calls.Load() - from; got != 2 {
			t.Errorf("renewal %d of %d terms took %d calls, want 2", n, len(items), got)
		}
	}
	if n := writesSince(t, s, before); n != 0 {
		t.Errorf("steady renewals wrote %d times; they should write nothing", n)
	}

	// A changed running flag is the one write, and the term stays put.
	items[2].Running = false
	if ok := testenv.Renew(t, s, "a", time.Minute, items...); slices.Contains(ok, false) {
		t.Fatalf("renewal with a new running flag = %v", ok)
	}
	if l := testenv.LeaseOf(t, s, "k0002"); l.Running || !l.Live {
		t.Errorf("k0002 after its running flag changed: %+v, want live and not running", l)
	}
	if got := leaseOf(t, s, s.liveKey("k0002")); got != lease {
		t.Errorf("k0002 moved to lease %x; only its record needed writing", got)
	}
	if n := writesSince(t, s, before); n != 1 {
		t.Errorf("the running flag took %d writes, want 1", n)
	}
}

// A pool gains and loses keys all the time: a new term joins the session
// as it is acquired and a released one leaves; nothing else is written.
func TestNewAndReleasedTermsLeaveTheOthersAlone(t *testing.T) {
	s := newTestStore(t)
	const ttl = 10 * time.Second
	items := acquireAll(t, s, "a", 5, ttl, time.Second)
	testenv.Renew(t, s, "a", ttl, items...)
	lease := leaseOf(t, s, s.liveKey("k0000"))
	items = append(items, store.RenewItem{Key: "new", Epoch: testenv.MustAcquire(t, s, "new", "a", ttl, time.Second), Running: true})
	if got := leaseOf(t, s, s.liveKey("new")); got != lease {
		t.Errorf("the new term is on lease %x, want the session's %x", got, lease)
	}
	if err := s.Release(testenv.Context(t), "a", []store.Term{{Key: "k0002", Epoch: items[2].Epoch}}); err != nil {
		t.Fatal(err)
	}
	items = slices.Delete(items, 2, 3)
	before := revision(t, s)
	for range 2 {
		if ok := testenv.Renew(t, s, "a", ttl, items...); slices.Contains(ok, false) {
			t.Fatalf("renewal after the changes = %v", ok)
		}
	}
	if n := writesSince(t, s, before); n != 0 {
		t.Errorf("renewals after a new term and a release wrote %d times", n)
	}
}

// An owner has one session per TTL and grace, so terms with different
// graces each keep their own.
func TestEachGraceHasItsOwnSession(t *testing.T) {
	s := newTestStore(t)
	const ttl = 10 * time.Second
	a := testenv.MustAcquire(t, s, "short", "a", ttl, time.Second)
	b := testenv.MustAcquire(t, s, "long", "a", ttl, 5*time.Second)
	c := testenv.MustAcquire(t, s, "short2", "a", ttl, time.Second)
	short, long := leaseOf(t, s, s.liveKey("short")), leaseOf(t, s, s.liveKey("long"))
	if short == long || leaseOf(t, s, s.liveKey("short2")) != short {
		t.Fatalf("sessions: short %x, long %x, short2 %x", short, long, leaseOf(t, s, s.liveKey("short2")))
	}
	if g1, g5 := grantedTTL(t, s, short), grantedTTL(t, s, long); g1 != 11 || g5 != 15 {
		t.Errorf("sessions granted %ds and %ds, want 11s and 15s", g1, g5)
	}
	items := []store.RenewItem{{Key: "short", Epoch: a}, {Key: "long", Epoch: b}, {Key: "short2", Epoch: c}}
	if ok := testenv.Renew(t, s, "a", ttl, items...); slices.Contains(ok, false) {
		t.Fatalf("renewal = %v", ok)
	}
}

// Losing the session — the process froze, or could not reach etcd, for
// longer than the TTL — fails every term on it closed: none is renewed,
// the renewal does not bring the session back, and peers still wait for
// the grace.
func TestLosingTheSessionFailsEveryTermClosed(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	peer := anotherStore(t, s)
	items := acquireAll(t, s, "a", 3, 2*time.Second, 2*time.Second)
	lease := leaseOf(t, s, s.liveKey("k0000"))
	time.Sleep(2600 * time.Millisecond) // the live part is over, the grace is not
	for _, it := range items {
		res, err := peer.Acquire(testenv.Context(t), store.AcquireRequest{Key: it.Key, Owner: "b", TTL: 2 * time.Second, Grace: 2 * time.Second})
		if err != nil || res.Acquired {
			t.Fatalf("b acquiring %s within a's grace = %+v, %v; want refused", it.Key, res, err)
		}
		if res.Holder.Live {
			t.Errorf("%s is listed as live after its session's live part ended: %+v", it.Key, res.Holder)
		}
	}
	// The owner's next calls start a new session instead of bringing the
	// old one back.
	testenv.MustAcquire(t, s, "another", "a", 2*time.Second, 2*time.Second)
	if ok := testenv.Renew(t, s, "a", 2*time.Second, items...); !slices.Equal(ok, []bool{false, false, false}) {
		t.Fatalf("renewal after the session's live part ended = %v, want every term lost", ok)
	}
	if left, err := s.client.TimeToLive(testenv.Context(t), lease); err != nil || left.TTL > 1 {
		t.Errorf("the lost session has %d s left (%v); an acquisition or the renewal kept it alive", left.TTL, err)
	}
	if got := leaseOf(t, s, s.liveKey("another")); got == lease {
		t.Error("the new term went onto the lost session")
	}
	time.Sleep(2 * time.Second)
	for _, it := range items {
		if res, err := peer.Acquire(testenv.Context(t), store.AcquireRequest{Key: it.Key, Owner: "b", TTL: 2 * time.Second}); err != nil || !res.Acquired {
			t.Errorf("b acquiring %s after a's grace = %+v, %v; want a new term", it.Key, res, err)
		}
	}
}

// A term the owner stops renewing without releasing it (it gave up on a
// deadline, or left a runner that would not stop to expire) must end even
// though the session it is on stays alive: it is moved off the session
// once no renewal listed it for a TTL, onto a lease that keeps peers out
// for another TTL + grace.
func TestATermLeftOutOfRenewalsEnds(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	const ttl, grace = 2 * time.Second, time.Second
	items := acquireAll(t, s, "a", 2, ttl, grace)
	keep, drop := items[0], items[1]
	testenv.Renew(t, s, "a", ttl, keep, drop)
	lastListed := time.Now()
	var movedAt time.Time
	for time.Since(lastListed) < 8*time.Second {
		time.Sleep(500 * time.Millisecond)
		if ok := testenv.Renew(t, s, "a", ttl, keep); !ok[0] {
			t.Fatal("renewal of the listed term was refused")
		}
		if movedAt.IsZero() && leaseOf(t, s, s.liveKey(drop.Key)) == 0 {
			movedAt = time.Now()
			if since := movedAt.Sub(lastListed); since < ttl {
				t.Errorf("the unlisted term left its session %v after it was last listed, before a TTL of %v", since, ttl)
			}
			res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: drop.Key, Owner: "b", TTL: ttl, Grace: grace})
			if err != nil || res.Acquired {
				t.Errorf("b acquiring the term as it left the session = %+v, %v; want refused", res, err)
			}
		}
	}
	if movedAt.IsZero() {
		t.Fatal("the unlisted term is still on the session 8s after it was last listed")
	}
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: drop.Key, Owner: "b", TTL: ttl, Grace: grace})
	if err != nil || !res.Acquired {
		t.Errorf("b could not take the unlisted term %v after it left the session: %+v, %v", time.Since(movedAt), res, err)
	}
	if l := testenv.LeaseOf(t, s, keep.Key); !l.Live || l.Owner != "a" {
		t.Errorf("the listed term: %+v, want a's live term", l)
	}
}

// A revocation moves the live key off the holder's session onto a lease
// of its own: renewing the session neither extends the revoked term nor
// keeps it blocked past a TTL + grace from the revocation.
func TestRenewingASessionDoesNotExtendARevokedTerm(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	items := acquireAll(t, s, "a", 2, 2*time.Second, time.Second)
	testenv.Renew(t, s, "a", 2*time.Second, items...)
	// Revoked by an operator's process, which the holder's store knows nothing of.
	op := anotherStore(t, s)
	revokedAt := time.Now()
	if ok, err := op.(store.Revoker).Revoke(testenv.Context(t), items[1].Key); err != nil || !ok {
		t.Fatalf("Revoke = %t, %v", ok, err)
	}
	if ok := testenv.Renew(t, s, "a", 2*time.Second, items...); !ok[0] || ok[1] {
		t.Fatalf("renewal after the revocation = %v, want [true false]", ok)
	}
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: items[1].Key, Owner: "b", TTL: 2 * time.Second})
	if err != nil || res.Acquired {
		t.Fatalf("b acquiring the revoked term at once = %+v, %v; want refused until its TTL + grace", res, err)
	}
	for time.Since(revokedAt) < 4*time.Second {
		time.Sleep(500 * time.Millisecond)
		if ok := testenv.Renew(t, s, "a", 2*time.Second, items[0]); !ok[0] {
			t.Fatal("renewal of the other term was refused")
		}
	}
	res, err = s.Acquire(testenv.Context(t), store.AcquireRequest{Key: items[1].Key, Owner: "b", TTL: 2 * time.Second})
	if err != nil || !res.Acquired {
		t.Errorf("b could not take the revoked term %v after the revocation: %+v, %v", time.Since(revokedAt), res, err)
	}
}

// Terms written before sessions (a live key on a lease of the TTL, a grace
// key on one of TTL + grace) keep working while replicas upgrade: peers
// wait for both keys, and the holder's renewal reads the term and moves it
// onto its session.
func TestATermFromBeforeSessionsIsRenewedOntoOne(t *testing.T) {
	s := newTestStore(t)
	ctx := testenv.Context(t)
	const key = "old"
	live, err := s.client.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	grace, err := s.client.Grant(ctx, 11)
	if err != nil {
		t.Fatal(err)
	}
	const epoch = 7
	rec := record{epoch: epoch, owner: "a", state: stateHeld, grace: 1}
	if _, err := s.client.Txn(ctx).Then(
		clientv3.OpPut(s.recordKey(key), rec.encode()),
		clientv3.OpPut(s.liveKey(key), liveValue(epoch, "a"), clientv3.WithLease(live.ID)),
		clientv3.OpPut(s.graceKey(key), fmtInt(epoch), clientv3.WithLease(grace.ID)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	if l := testenv.LeaseOf(t, s, key); !l.Live || l.TimeLeft < 8*time.Second || l.TimeLeft > 11*time.Second {
		t.Errorf("List of the old-layout term: %+v, want live with about 10s left", l)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "b", TTL: 10 * time.Second})
	if err != nil || res.Acquired {
		t.Fatalf("b acquiring the old-layout term = %+v, %v; want refused", res, err)
	}
	item := store.RenewItem{Key: key, Epoch: epoch, Running: true}
	if ok := testenv.Renew(t, s, "a", 10*time.Second, item); !ok[0] {
		t.Fatal("the old-layout term was not renewed")
	}
	session := leaseOf(t, s, s.liveKey(key))
	if session == live.ID || leaseOf(t, s, s.graceKey(key)) != 0 {
		t.Errorf("after its renewal the term is on lease %x (was %x), grace key on %x; want a session and no grace key",
			session, live.ID, leaseOf(t, s, s.graceKey(key)))
	}
	if l := testenv.LeaseOf(t, s, key); !l.Live || !l.Running || l.Epoch != epoch {
		t.Errorf("the term after its renewal: %+v, want live, running, epoch %d", l, epoch)
	}
	if ok := testenv.Renew(t, s, "a", 10*time.Second, item); !ok[0] {
		t.Error("the term's renewal on its session was refused")
	}
}

// Lease TTLs are whole seconds with a server floor: a session lasts at
// least the TTL rounded up (and the floor) plus the grace rounded up, so
// a term may end later than asked, never earlier.
func TestSessionTTLsAreRoundedUpToWholeSecondsAndTheServerFloor(t *testing.T) {
	s := newTestStore(t)
	for _, tc := range []struct {
		ttl, grace time.Duration
		min        int64
	}{
		{1500 * time.Millisecond, 300 * time.Millisecond, 3},
		{time.Millisecond, 0, 1},
		{3 * time.Second, 2 * time.Second, 5},
	} {
		key := fmt.Sprintf("ttl-%v-%v", tc.ttl, tc.grace)
		testenv.MustAcquire(t, s, key, "a", tc.ttl, tc.grace)
		if got := grantedTTL(t, s, leaseOf(t, s, s.liveKey(key))); got < tc.min {
			t.Errorf("ttl %v grace %v: a session of %ds, want ≥ %ds", tc.ttl, tc.grace, got, tc.min)
		}
	}
}
