package etcd

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// storeWith opens a store in s's namespace whose client runs hook around
// every unary call, as another process would.
func storeWith(t *testing.T, s *Store, hook grpc.UnaryClientInterceptor) *Store {
	t.Helper()
	o, err := New(clientWith(t, grpc.WithChainUnaryInterceptor(hook)), Options{Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// A renewal may list a term twice with a changed running flag: the record
// is written once (etcd refuses a transaction that puts a key twice).
func TestATermListedTwiceWithANewRunningFlagIsRenewed(t *testing.T) {
	s := newTestStore(t)
	e := testenv.MustAcquire(t, s, "k", "a", 10*time.Second, time.Second) // running true
	it := store.RenewItem{Key: "k", Epoch: e, Running: false}
	if ok := testenv.Renew(t, s, "a", 10*time.Second, it, it); !ok[0] || !ok[1] {
		t.Fatalf("Renew of one term listed twice = %v, want both renewed", ok)
	}
	if l := testenv.LeaseOf(t, s, "k"); l.Running {
		t.Errorf("the running flag was not written: %+v", l)
	}
}

// Acquisitions keep alive only a session a renewal kept alive lately: an
// owner that stopped renewing a term, but keeps polling for other keys,
// lets it end.
func TestAcquisitionsDoNotKeepATermNobodyRenewsAlive(t *testing.T) {
	t.Parallel() // mostly waiting for whole-second leases
	s := newTestStore(t)
	peer := anotherStore(t, s)
	const ttl, grace = 2 * time.Second, time.Second
	testenv.MustAcquire(t, peer, "busy", "b", time.Minute, grace)
	testenv.MustAcquire(t, s, "abandoned", "a", ttl, grace) // never renewed, never released
	start := time.Now()
	for time.Since(start) < 2*ttl+grace+time.Second { // a pool member polling for work
		time.Sleep(500 * time.Millisecond)
		res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: "busy", Owner: "a", TTL: ttl, Grace: grace})
		if err != nil || res.Acquired {
			t.Fatalf("acquire busy = %+v, %v", res, err)
		}
	}
	res, err := peer.Acquire(testenv.Context(t), store.AcquireRequest{Key: "abandoned", Owner: "b", TTL: ttl, Grace: grace})
	if err != nil || !res.Acquired {
		t.Errorf("a term last confirmed %v ago (ttl %v, grace %v) still blocks peers: %+v, %v",
			time.Since(start).Round(time.Second), ttl, grace, res.Holder, err)
	}
}

// A revocation whose write happened but whose answer was lost (etcd's
// "request timed out", a leader change) must leave its grace key: the
// holder may still run until its deadline.
func TestARevocationWithALostAnswerKeepsPeersOut(t *testing.T) {
	s := newTestStore(t)
	peer := anotherStore(t, s)
	const ttl, grace = 10 * time.Second, 5 * time.Second
	e := testenv.MustAcquire(t, s, "job", "a", ttl, grace)
	if ok := testenv.Renew(t, s, "a", ttl, store.RenewItem{Key: "job", Epoch: e}); !ok[0] {
		t.Fatal("not renewed")
	}
	var lose atomic.Bool
	lose.Store(true)
	op := storeWith(t, s, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := inv(ctx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/Txn") && lose.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "etcdserver: request timed out") // applied, answer lost
		}
		return err
	})
	if _, err := op.Revoke(testenv.Context(t), "job"); err == nil {
		t.Fatal("Revoke with its answer lost reported no error")
	}
	res, err := peer.Acquire(testenv.Context(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace})
	if err != nil || res.Acquired {
		t.Errorf("b acquiring after a revocation whose answer was lost = %+v, %v; want refused until a's deadline + grace", res, err)
	}
}

// A revocation grants the retired lease, then writes. A renewal of the
// holder sent in between is confirmed (its live key was still on the
// session) and promises send + ttl; the retired lease is kept alive after
// the write — also when the write's answer was lost — so a stall between
// the grant and the write cannot let a peer in before that deadline +
// grace.
func TestARevocationStalledBeforeItsWriteStillOutlastsTheHoldersDeadline(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "answered"
		if lost {
			name = "answer-lost"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // mostly waiting for whole-second leases
			revocationStalledBeforeItsWrite(t, lost)
		})
	}
}

func revocationStalledBeforeItsWrite(t *testing.T, loseAnswer bool) {
	s := newTestStore(t)
	peer := anotherStore(t, s)
	const ttl, grace = 3 * time.Second, time.Second
	e := testenv.MustAcquire(t, s, "job", "a", ttl, grace)
	item := store.RenewItem{Key: "job", Epoch: e, Running: true}
	granted := make(chan struct{})
	var once, stalled atomic.Bool
	op := storeWith(t, s, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		first := strings.HasSuffix(method, "/Txn") && stalled.CompareAndSwap(false, true)
		if first {
			time.Sleep(2500 * time.Millisecond) // a GC pause, a network hiccup
		}
		err := inv(ctx, method, req, reply, cc, opts...)
		if strings.HasSuffix(method, "/LeaseGrant") && once.CompareAndSwap(false, true) {
			close(granted)
		}
		if first && err == nil && loseAnswer {
			return status.Error(codes.Unavailable, "etcdserver: request timed out") // applied, answer lost
		}
		return err
	})
	done := make(chan error, 1)
	go func() { _, err := op.Revoke(context.Background(), "job"); done <- err }()
	<-granted
	time.Sleep(2 * time.Second)
	sent := time.Now()
	if ok := testenv.Renew(t, s, "a", ttl, item); !ok[0] {
		t.Fatal("the renewal during the revocation was refused; the race did not happen")
	}
	deadline := sent.Add(ttl + grace)
	if err := <-done; (err != nil) != loseAnswer {
		t.Fatalf("Revoke = %v", err)
	}
	for time.Now().Before(deadline) {
		res, err := peer.Acquire(testenv.Context(t), store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace})
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			t.Fatalf("b acquired %v before a's confirmed deadline + grace", time.Until(deadline).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An eviction moves only what the renewal that chose it saw: a new term of
// the key acquired meanwhile stays on the session.
func TestAnEvictionLeavesANewerTermAlone(t *testing.T) {
	s := newTestStore(t)
	const ttl, grace = 10 * time.Second, time.Second
	testenv.MustAcquire(t, s, "k", "a", ttl, grace) // the term a gave up on
	sess := s.lookupSession("a", 10, 1)
	seen, err := s.client.Get(testenv.Context(t), "/")
	if err != nil {
		t.Fatal(err)
	}
	// A renewal chose k at revision seen; before its eviction writes, a
	// takes k again.
	e2 := testenv.MustAcquire(t, s, "k", "a", ttl, grace)
	s.evict(testenv.Context(t), sess, "a", []string{"k"}, []member{{}}, seen.Header.Revision)
	if ok := testenv.Renew(t, s, "a", ttl, store.RenewItem{Key: "k", Epoch: e2}); !ok[0] {
		t.Errorf("the new term %d, acquired a moment ago, was lost to the eviction of the old one", e2)
	}
}
