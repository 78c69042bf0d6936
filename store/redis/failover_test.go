package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/netproxy"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

const (
	failoverTTL   = 2 * time.Second
	failoverGrace = 500 * time.Millisecond
)

// replicaOf starts a private replica of primary, replicating through a
// proxy the test can cut, and waits until it is in sync.
func replicaOf(t *testing.T, primary *testenv.RedisServer) (*testenv.RedisServer, *netproxy.Proxy) {
	t.Helper()
	link, err := netproxy.New(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	host, port, _ := strings.Cut(link.Addr(), ":")
	replica := testenv.StartRedis(t, "--replicaof", host, port)
	if err := replica.WaitSynced(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
	return replica, link
}

// A replica promoted after its primary died lacks what the primary had
// not sent it. Here the replication link is cut, so the acquisition of
// "lost" is acknowledged to a and never replicated. Without the server
// check, b took "lost" at once: two holders. With it, the new replication
// id starts a quarantine: no term is granted for TTL + grace (a fails
// closed meanwhile: its renewal is refused), while a's replicated term on
// "kept" renews on.
func TestAPromotedReplicaGrantsNoLostTermAtOnce(t *testing.T) {
	primary := testenv.StartRedis(t)
	replica, link := replicaOf(t, primary)
	ctx := testenv.Context(t)
	ns := randomNamespace()
	a, err := Open(ctx, "redis://"+primary.Addr()+"/0", Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	kept := testenv.MustAcquire(t, a, "kept", "a", failoverTTL, failoverGrace)
	if n, err := primary.Client().Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}

	link.SetDown(true)
	lost := testenv.MustAcquire(t, a, "lost", "a", failoverTTL, failoverGrace)
	primary.Kill()
	if err := replica.Client().ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	b, err := Open(ctx, "redis://"+replica.Addr()+"/0", Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	acquire := func(key string) store.AcquireResult {
		res, err := b.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "b", TTL: failoverTTL, Grace: failoverGrace})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := acquire("lost")
	if res.Acquired {
		t.Fatalf("b was granted %q (epoch %d) at once after the promotion; a was granted epoch %d on the old primary and may still run it", "lost", res.Epoch, lost)
	}
	if h := res.Holder; !h.Live || h.Owner != "" || h.TimeLeft <= 0 || h.TimeLeft > failoverTTL {
		t.Errorf("refused during the quarantine with holder %+v; want a live term of nobody's ending within the TTL", h)
	}
	if got := testenv.Renew(t, b, "a", failoverTTL,
		store.RenewItem{Key: "kept", Epoch: kept}, store.RenewItem{Key: "lost", Epoch: lost}); !got[0] || got[1] {
		t.Errorf("renewals after the promotion (kept, lost) = %v; want [true false]", got)
	}
	for {
		res = acquire("lost")
		if res.Acquired {
			break
		}
		if h := res.Holder; h.TimeLeft <= -failoverGrace || h.TimeLeft > failoverTTL {
			t.Fatalf("refused with holder %+v: it does not say when the quarantine ends", h)
		}
		if got := testenv.Renew(t, b, "a", failoverTTL, store.RenewItem{Key: "kept", Epoch: kept}); !got[0] {
			t.Fatalf("a's replicated term on %q was not renewed during the quarantine", "kept")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waited := time.Since(promoted); waited < failoverTTL+failoverGrace {
		t.Errorf("b got %q %v after the promotion, before TTL + grace = %v", "lost", waited, failoverTTL+failoverGrace)
	}
	if res.Epoch <= lost {
		t.Errorf("b's epoch %d is not above a's lost epoch %d", res.Epoch, lost)
	}
}

// A failover that loses a new namespace's first writes leaves it empty on
// the promoted replica. A client that had an answer from the namespace
// before knows it existed, and takes the empty one for lost data: it
// grants nothing with a grace for TTL + grace. (The replicas reach the
// primary at one address, which the failover moves to the replica.)
func TestAClientThatSawTheNamespaceQuarantinesWhenItComesBackEmpty(t *testing.T) {
	primary := testenv.StartRedis(t)
	replica, link := replicaOf(t, primary)
	front, err := netproxy.New(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	ctx := testenv.Context(t)
	ns := randomNamespace()
	open := func() *Store {
		s, err := Open(ctx, "redis://"+front.Addr()+"/0", Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	link.SetDown(true) // nothing from here on reaches the replica
	testenv.MustAcquire(t, b, "other", "b", failoverTTL, failoverGrace)
	lost := testenv.MustAcquire(t, a, "job", "a", failoverTTL, failoverGrace)
	primary.Kill()
	if err := replica.Client().ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	front.SetUpstream(replica.Addr())
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := b.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: failoverTTL, Grace: failoverGrace})
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("Acquire after the failover: %v", err)
			}
			time.Sleep(50 * time.Millisecond) // go-redis redials the moved address
			continue
		}
		if res.Acquired {
			t.Fatalf("b was granted %q (epoch %d) at once on the empty namespace; a was granted epoch %d and may still run it", "job", res.Epoch, lost)
		}
		return
	}
}
