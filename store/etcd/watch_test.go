package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func nextEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the watch channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return store.Event{}
}

func TestWatchReportsNewTermsAndReleasesOnly(t *testing.T) {
	s := newTestStore(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	ch, err := s.Watch(ctx, "w/")
	if err != nil {
		t.Fatal(err)
	}
	e1 := mustAcquire(t, s, "w/1", "a", time.Minute, time.Second)
	if ev := nextEvent(t, ch); ev != (store.Event{Kind: store.Acquired, Key: "w/1", Owner: "a", Epoch: e1}) {
		t.Fatalf("first event %+v, want a's acquisition of w/1 at epoch %d", ev, e1)
	}
	// Renewals (a rebind, a keep-alive, a new running flag), keys outside
	// the prefix and revocations are not events.
	for _, running := range []bool{true, true, false} {
		renew(t, s, "a", time.Minute, store.RenewItem{Key: "w/1", Epoch: e1, Running: running})
	}
	mustAcquire(t, s, "x/1", "a", time.Minute, time.Second)
	e2 := mustAcquire(t, s, "w/2", "b", time.Minute, time.Second)
	if ok, err := s.Revoke(testCtx(t), "w/2"); err != nil || !ok {
		t.Fatalf("Revoke(w/2) = %t, %v", ok, err)
	}
	if err := s.Release(testCtx(t), "a", []store.Term{{Key: "w/1", Epoch: e1}}); err != nil {
		t.Fatal(err)
	}
	e3 := mustAcquire(t, s, "w/1", "c", time.Minute, time.Second)
	want := []store.Event{
		{Kind: store.Acquired, Key: "w/2", Owner: "b", Epoch: e2},
		{Kind: store.Released, Key: "w/1", Owner: "a", Epoch: e1},
		{Kind: store.Acquired, Key: "w/1", Owner: "c", Epoch: e3},
	}
	for i, w := range want {
		if ev := nextEvent(t, ch); ev != w {
			t.Fatalf("event %d: %+v, want %+v", i+1, ev, w)
		}
	}
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestWatchChannelsCloseWhenTheStoreCloses(t *testing.T) {
	s := newTestStore(t)
	var chans []<-chan store.Event
	for range 3 {
		ch, err := s.Watch(testCtx(t), "")
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatalf("watch %d delivered an event after Close", i)
			}
		default:
			t.Fatalf("watch %d is still open after Close returned", i)
		}
	}
}
