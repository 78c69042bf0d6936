package etcd

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// freshStore makes the isolated stores of the shared suites.
func freshStore(t *testing.T) store.Store { return newTestStore(t) }

// TestConformance runs the shared suite on whole seconds: etcd leases have
// a TTL of whole seconds with a floor of 2s, so the suite's shortest term
// (2 units, in the randomized test) must be 2s. The tolerance covers the
// half second TimeToLive's rounding may be off and the leader's 500ms
// expiry tick.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:       freshStore,
		Advance:   storetest.Sleep,
		Unit:      time.Second,
		Tolerance: 750 * time.Millisecond,
		// Terms share their owner's session (session.go).
		SharedExpiry: true,
	})
}

func TestWatch(t *testing.T) {
	storetest.RunWatchTests(t, storetest.WatchHarness{New: freshStore, Peer: anotherStore})
}

// anotherStore opens a store with a client of its own on s's namespace,
// as another process would.
func anotherStore(t *testing.T, s store.Store) store.Store {
	peer, err := New(testClient(t), Options{Prefix: s.(*Store).prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return peer
}
