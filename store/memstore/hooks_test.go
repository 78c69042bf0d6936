package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

const ttl, grace = 10 * time.Second, 5 * time.Second

func acquire(t *testing.T, s store.Store, key, owner string) store.AcquireResult {
	t.Helper()
	res, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: grace})
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, owner, err)
	}
	return res
}

func renew(t *testing.T, s store.Store, owner, key string, epoch int64) bool {
	t.Helper()
	ok, err := s.Renew(t.Context(), owner, ttl, []store.RenewItem{{Key: key, Epoch: epoch}})
	if err != nil {
		t.Fatalf("Renew(%q, %q, %d): %v", owner, key, epoch, err)
	}
	return ok[0]
}

func TestFaultFailsOnlyTheChosenOperationAndChangesNothing(t *testing.T) {
	s, _ := newStore()
	e := acquire(t, s, "k", "a").Epoch
	down := errors.New("connection refused")
	s.SetFault(func(op string) error {
		if op == memstore.OpRenew || op == memstore.OpRelease {
			return down
		}
		return nil
	})
	if _, err := s.Renew(t.Context(), "a", ttl, []store.RenewItem{{Key: "k", Epoch: e}}); !errors.Is(err, down) {
		t.Errorf("Renew under a renew fault: %v, want %v", err, down)
	}
	if err := s.Release(t.Context(), "a", []store.Term{{Key: "k", Epoch: e}}); !errors.Is(err, down) {
		t.Errorf("Release under a release fault: %v, want %v", err, down)
	}
	if res := acquire(t, s, "k", "b"); res.Acquired {
		t.Errorf("b acquired k (epoch %d): the failed release must not have ended a's term", res.Epoch)
	}
	s.SetFault(nil)
	if !renew(t, s, "a", "k", e) {
		t.Errorf("renewal of k (epoch %d) refused after the fault was cleared", e)
	}
}

func TestBlockingFaultEndsWithTheCallersCtx(t *testing.T) {
	s, _ := newStore()
	entered, unblock := make(chan struct{}), make(chan struct{})
	s.SetFault(func(op string) error {
		close(entered)
		<-unblock
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "a", TTL: ttl})
		done <- err
	}()
	<-entered
	cancel()
	close(unblock)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire cancelled while the store stalled: %v, want context.Canceled", err)
	}
	s.SetFault(nil)
	if ls, _ := s.List(t.Context(), ""); len(ls) != 0 {
		t.Errorf("the cancelled Acquire left %d records", len(ls))
	}
}

func TestPutStagesAPeersNewerTerm(t *testing.T) {
	s, _ := newStore()
	e := acquire(t, s, "k", "a").Epoch
	s.Put(store.Lease{Key: "k", Owner: "b", Epoch: e + 5, TimeLeft: ttl, Running: true})

	if renew(t, s, "a", "k", e) {
		t.Errorf("a renewed k (epoch %d) after Put gave it to b with epoch %d", e, e+5)
	}
	res := acquire(t, s, "k", "c")
	if res.Acquired || res.Holder.Owner != "b" || res.Holder.Epoch != e+5 || !res.Holder.Live || !res.Holder.Running {
		t.Errorf("c's acquisition of k = %+v, want refused by b's live running term %d", res, e+5)
	}
	if err := s.Release(t.Context(), "b", []store.Term{{Key: "k", Epoch: e + 5}}); err != nil {
		t.Fatal(err)
	}
	if res := acquire(t, s, "k", "c"); !res.Acquired || res.Epoch != e+6 {
		t.Errorf("c's acquisition of released k = %+v, want epoch %d", res, e+6)
	}
}

func TestPutRejectsAnInvalidKey(t *testing.T) {
	s, _ := newStore()
	defer func() {
		if recover() == nil {
			t.Error("Put with an empty key did not panic")
		}
	}()
	s.Put(store.Lease{Owner: "a", Epoch: 1})
}

// TestDefaultClockIsTheSynctestBubblesClock pins that a store made with
// zero Options reads time.Now on every call, so engine tests can run it
// inside testing/synctest and sleep through TTLs instantly.
func TestDefaultClockIsTheSynctestBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{})
		e := acquire(t, s, "k", "a").Epoch
		time.Sleep(ttl + grace - time.Millisecond)
		if res := acquire(t, s, "k", "b"); res.Acquired {
			t.Fatalf("b acquired k 1ms before a's expiry + grace")
		}
		time.Sleep(time.Millisecond)
		if res := acquire(t, s, "k", "b"); !res.Acquired || res.Epoch <= e {
			t.Fatalf("b's acquisition at a's expiry + grace = %+v, want a term above epoch %d", res, e)
		}
	})
}

func TestSlowWatcherNeverBlocksTheStore(t *testing.T) {
	clk := newFakeClock()
	s := memstore.New(memstore.Options{Clock: clk.Now, WatchBuffer: 2})
	ctx, cancel := context.WithCancel(t.Context())
	events, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 { // nobody reads events meanwhile
		res := acquire(t, s, fmt.Sprint("k", i), "a")
		if err := s.Release(t.Context(), "a", []store.Term{{Key: fmt.Sprint("k", i), Epoch: res.Epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	// The store went on: the buffer holds what came last, and what it
	// dropped is owned up to by a Missed event after it.
	got := []store.Event{<-events, <-events}
	if got[len(got)-1].Kind != store.Missed {
		t.Errorf("events %+v after 200 were offered to a buffer of 2; want a Missed event last", got)
	}
	cancel()
	for ev := range events {
		t.Errorf("event %+v after the buffer was drained and the watch ended", ev)
	}
}

func TestRevokeLeavesKeysWithoutALiveTermAlone(t *testing.T) {
	s, clk := newStore()
	released := acquire(t, s, "released", "a").Epoch
	if err := s.Release(t.Context(), "a", []store.Term{{Key: "released", Epoch: released}}); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, "expired", "a")
	clk.Advance(ttl)
	before, _ := s.List(t.Context(), "")
	for _, key := range []string{"released", "expired", "unknown"} {
		if ok, err := s.Revoke(t.Context(), key); ok || err != nil {
			t.Errorf("Revoke(%q) = %t, %v; want false, nil", key, ok, err)
		}
	}
	after, _ := s.List(t.Context(), "")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("Revoke changed keys without a live term:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestRevokedTermIsNotLiveButBlocksUntilItsExpiryPlusGrace(t *testing.T) {
	s, clk := newStore()
	e := acquire(t, s, "k", "a").Epoch
	if ok, err := s.Revoke(t.Context(), "k"); !ok || err != nil {
		t.Fatalf("Revoke = %t, %v", ok, err)
	}
	ls, _ := s.List(t.Context(), "k")
	want := store.Lease{Key: "k", Epoch: e + 1, TimeLeft: ttl}
	if len(ls) != 1 || ls[0] != want {
		t.Errorf("List after Revoke = %+v, want [%+v]", ls, want)
	}
	clk.Advance(ttl + grace - time.Nanosecond)
	if res := acquire(t, s, "k", "b"); res.Acquired {
		t.Errorf("b acquired revoked k before its expiry + grace")
	}
	clk.Advance(time.Nanosecond)
	if res := acquire(t, s, "k", "b"); !res.Acquired || res.Epoch != e+2 {
		t.Errorf("b's acquisition after grace = %+v, want epoch %d", res, e+2)
	}
}
