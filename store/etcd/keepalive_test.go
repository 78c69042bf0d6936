package etcd

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// keepAliveGate holds every keep-alive a store sends until the test lets
// it through, and counts them: etcd's client opens a stream per
// keep-alive.
type keepAliveGate struct {
	opened atomic.Int64
	sent   chan struct{} // one value per keep-alive opened
	pass   chan struct{} // one value lets one keep-alive through
	ended  chan struct{} // closed when the test ends: the gate opens
	fail   atomic.Bool   // keep-alives let through fail with an error the client does not retry
}

// letNextThrough waits for the next keep-alive to reach the gate and lets
// it through.
func (g *keepAliveGate) letNextThrough(t *testing.T) {
	t.Helper()
	await(t, g.sent)
	g.pass <- struct{}{}
}

// gatedStore opens a store whose keep-alives wait at a gate.
func gatedStore(t *testing.T) (*Store, *keepAliveGate) {
	t.Helper()
	g := &keepAliveGate{sent: make(chan struct{}, 64), pass: make(chan struct{}, 64), ended: make(chan struct{})}
	c := clientWith(t, grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method == "/etcdserverpb.Lease/LeaseKeepAlive" {
				g.opened.Add(1)
				g.sent <- struct{}{}
				select {
				case <-g.pass:
				case <-g.ended:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				if g.fail.Load() {
					return nil, status.Error(codes.PermissionDenied, "the gate failed it")
				}
			}
			return streamer(ctx, desc, cc, method, opts...)
		}))
	t.Cleanup(func() { close(g.ended) }) // before the client closes
	return storeOn(t, c), g
}

// gatedSession opens a store whose keep-alives wait at a gate, and a
// session of owner "a" on it.
func gatedSession(t *testing.T) (*Store, *session, *keepAliveGate) {
	t.Helper()
	s, gate := gatedStore(t)
	sess, _, err := s.session(testenv.Context(t), "a", 60, 1)
	if err != nil {
		t.Fatal(err)
	}
	return s, sess, gate
}

// waitForWaiters returns once n calls wait for the session's next
// keep-alive, the one not sent yet.
func waitForWaiters(t *testing.T, sess *session, n int) {
	t.Helper()
	ctx := testenv.Context(t)
	for {
		sess.keepAlives.mu.Lock()
		got := 0
		if f := sess.keepAlives.next; f != nil {
			got = f.waiting
		}
		sess.keepAlives.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d calls wait for the next keep-alive, want %d", got, n)
		default:
			runtime.Gosched()
		}
	}
}

// await receives from ch, failing the test if nothing comes in time.
func await[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-testenv.Context(t).Done():
		t.Fatal("nothing came in time")
		panic("unreachable")
	}
}

type keepAliveAnswer struct {
	alive  bool
	err    error
	opened int64 // keep-alives opened when the call returned
}

// heldCall starts a call whose keep-alive is the first sent, and returns
// once the gate holds it, with the channel its answer will come on.
func heldCall(t *testing.T, ctx context.Context, s *Store, sess *session, gate *keepAliveGate) <-chan keepAliveAnswer {
	t.Helper()
	answer := make(chan keepAliveAnswer, 1)
	go keepAliveIn(ctx, s, sess, gate, answer)
	await(t, gate.sent)
	return answer
}

func keepAliveIn(ctx context.Context, s *Store, sess *session, gate *keepAliveGate, out chan<- keepAliveAnswer) {
	alive, err := s.keepAlive(ctx, sess)
	out <- keepAliveAnswer{alive, err, gate.opened.Load()}
}

// Calls that overlap share keep-alives, but none is answered by one sent
// before it began: while one is in flight, the calls that arrive wait for
// the next. A keep-alive sent before an acquisition began may leave the
// session ending before the deadline the acquisition promises.
func TestOverlappingKeepAlivesShareOneSentAfterEachBegan(t *testing.T) {
	s, sess, gate := gatedSession(t)
	ctx := testenv.Context(t)
	first := heldCall(t, ctx, s, sess, gate) // the first keep-alive is in flight, held at the gate
	const later = 8
	answers := make(chan keepAliveAnswer, later)
	for range later {
		go keepAliveIn(ctx, s, sess, gate, answers)
	}
	waitForWaiters(t, sess, later)
	gate.pass <- struct{}{}
	if a := await(t, first); !a.alive || a.err != nil {
		t.Fatalf("the first keep-alive = %v, %v; want alive", a.alive, a.err)
	}
	gate.letNextThrough(t)
	for range later {
		a := await(t, answers)
		if !a.alive || a.err != nil {
			t.Fatalf("a later keep-alive = %v, %v; want alive", a.alive, a.err)
		}
		if a.opened != 2 {
			t.Fatalf("a call that began while the first keep-alive was in flight returned with %d keep-alives sent; "+
				"it must wait for the second, sent after it began", a.opened)
		}
	}
	if got := gate.opened.Load(); got != 2 {
		t.Errorf("%d keep-alives for 1 call and %d that overlapped it, want 2", got, later)
	}
}

// A call that gives up leaves the keep-alive it waited for to the calls
// still waiting; once none waits, the keep-alive stops.
func TestAKeepAliveOutlivesTheCallsThatGiveUpButNotTheLast(t *testing.T) {
	s, sess, gate := gatedSession(t)
	ctx := testenv.Context(t)
	firstCtx, giveUpFirst := context.WithCancel(ctx)
	first := heldCall(t, firstCtx, s, sess, gate)
	quitter, giveUp := context.WithCancel(ctx)
	gaveUp, stayed := make(chan keepAliveAnswer, 1), make(chan keepAliveAnswer, 1)
	go keepAliveIn(quitter, s, sess, gate, gaveUp)
	go keepAliveIn(ctx, s, sess, gate, stayed)
	waitForWaiters(t, sess, 2)
	giveUp()
	if a := await(t, gaveUp); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the call that gave up = %v, %v; want its context's error", a.alive, a.err)
	}
	// The first call gives up too, the only one waiting for the keep-alive
	// in flight: it stops at the gate, and the next goes out.
	giveUpFirst()
	if a := await(t, first); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the first call, given up = %v, %v; want its context's error", a.alive, a.err)
	}
	gate.letNextThrough(t)
	if a := await(t, stayed); !a.alive || a.err != nil {
		t.Fatalf("the call that stayed = %v, %v; want alive: a call that gave up ended the keep-alive it waited for", a.alive, a.err)
	}
}

// A keep-alive of a lease that has ended answers every call waiting for
// it, and drops the session.
func TestAKeepAliveOfAnEndedLeaseAnswersEveryCallNotAlive(t *testing.T) {
	s, sess, gate := gatedSession(t)
	ctx := testenv.Context(t)
	if _, err := s.client.Revoke(ctx, sess.lease); err != nil {
		t.Fatal(err)
	}
	answers := make(chan keepAliveAnswer, 4)
	go keepAliveIn(ctx, s, sess, gate, answers)
	await(t, gate.sent)
	for range 3 {
		go keepAliveIn(ctx, s, sess, gate, answers)
	}
	waitForWaiters(t, sess, 3)
	gate.pass <- struct{}{}
	gate.letNextThrough(t)
	for range 4 {
		if a := await(t, answers); a.alive || a.err != nil {
			t.Fatalf("a keep-alive of a revoked lease = %v, %v; want not alive, no error", a.alive, a.err)
		}
	}
	if s.lookupSession("a", 60, 1) != nil {
		t.Error("the session of a revoked lease is still used")
	}
}

// A call that gives up on a keep-alive not sent yet, the only one waiting
// for it, leaves nothing behind: the next call gets a keep-alive of its
// own, not the abandoned one, ended.
func TestAKeepAliveGivenUpBeforeItWasSentIsNotTheNextCallsToo(t *testing.T) {
	s, sess, gate := gatedSession(t)
	ctx := testenv.Context(t)
	first := heldCall(t, ctx, s, sess, gate)
	quitter, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan keepAliveAnswer, 1)
	go keepAliveIn(quitter, s, sess, gate, gaveUp)
	waitForWaiters(t, sess, 1)
	giveUp()
	await(t, gaveUp)
	later := make(chan keepAliveAnswer, 1)
	go keepAliveIn(ctx, s, sess, gate, later)
	waitForWaiters(t, sess, 1)
	gate.pass <- struct{}{}
	await(t, first)
	gate.letNextThrough(t)
	if a := await(t, later); !a.alive || a.err != nil {
		t.Fatalf("a call after a keep-alive given up unsent = %v, %v; want alive", a.alive, a.err)
	}
}

// A keep-alive that fails, its lease not known to have ended, answers
// every call waiting for it with the error, and keeps the session: a
// renewal must not report its terms lost on a call that failed.
func TestAFailedKeepAliveAnswersEveryCallWithItsError(t *testing.T) {
	s, sess, gate := gatedSession(t)
	ctx := testenv.Context(t)
	first := heldCall(t, ctx, s, sess, gate)
	answers := make(chan keepAliveAnswer, 3)
	for range 3 {
		go keepAliveIn(ctx, s, sess, gate, answers)
	}
	waitForWaiters(t, sess, 3)
	gate.pass <- struct{}{}
	if a := await(t, first); !a.alive || a.err != nil {
		t.Fatalf("the first keep-alive = %v, %v; want alive", a.alive, a.err)
	}
	gate.fail.Store(true)
	gate.letNextThrough(t)
	for range 3 {
		if a := await(t, answers); status.Code(a.err) != codes.PermissionDenied {
			t.Fatalf("a call waiting for a failed keep-alive = %v, %v; want its error", a.alive, a.err)
		}
	}
	if s.lookupSession("a", 60, 1) != sess {
		t.Error("a keep-alive that failed dropped the session")
	}
}
