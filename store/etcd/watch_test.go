package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// A revocation moves the record to a new epoch owned by nobody: no term
// starts, so a watch hears nothing.
func TestRevocationIsNoEvent(t *testing.T) {
	s := newTestStore(t)
	ctx, cancel := context.WithCancel(testenv.Context(t))
	defer cancel()
	ch, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	e := testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Second)
	if ev := testenv.NextEvent(t, ch); ev != (store.Event{Kind: store.Acquired, Key: "job", Owner: "a", Epoch: e}) {
		t.Fatalf("event %+v, want a's acquisition", ev)
	}
	if ok, err := s.Revoke(testenv.Context(t), "job"); err != nil || !ok {
		t.Fatalf("Revoke = %t, %v", ok, err)
	}
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %+v after a revocation", ev)
	case <-time.After(300 * time.Millisecond):
	}
}
