package etcd

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// awaitRelease waits for w's watch to report key's release.
func awaitRelease(t *testing.T, events <-chan store.Event, key string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the watch ended")
			}
			if ev.Kind == store.Released && ev.Key == key {
				return
			}
		case <-timeout:
			t.Fatalf("no release of %s reported", key)
		}
	}
}

// A peer that heard of a release takes the key with one write and no
// read; if the key changed since, it reads and is refused as usual.
func TestAPeerThatHeardOfAReleaseAcquiresWithoutReadingIt(t *testing.T) {
	peer, calls := countingStore(t)
	holder := anotherStore(t, peer)
	ctx := testenv.Context(t)
	events, err := peer.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.MustAcquire(t, peer, "warm", "b", time.Minute, time.Second) // b's session exists

	e := testenv.MustAcquire(t, holder, "job", "a", time.Minute, time.Second)
	testenv.Release(t, holder, "a", store.Term{Key: "job", Epoch: e})
	awaitRelease(t, events, "job")
	from := calls.Load()
	next := testenv.MustAcquire(t, peer, "job", "b", time.Minute, time.Second)
	if got := calls.Load() - from; got != 2 {
		t.Errorf("acquiring a key heard released took %d calls, want 2 (the write and the session's keep-alive)", got)
	}
	if next <= e {
		t.Errorf("new epoch %d, want > %d", next, e)
	}

	// The hint goes stale: another owner took the key after the release.
	testenv.Release(t, peer, "b", store.Term{Key: "job", Epoch: next})
	awaitRelease(t, events, "job")
	third := testenv.MustAcquire(t, holder, "job", "c", time.Minute, time.Second)
	res, err := peer.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: time.Minute, Grace: time.Second})
	if err != nil || res.Acquired {
		t.Fatalf("acquiring with a stale hint = %+v, %v; want refused", res, err)
	}
	if res.Holder.Owner != "c" || res.Holder.Epoch != third {
		t.Errorf("refused by %+v, want c's epoch %d", res.Holder, third)
	}
}
