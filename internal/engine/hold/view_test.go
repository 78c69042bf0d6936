package hold_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestPushedEventsKeepTheViewAndOlderTermsChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeeper(memstore.New(memstore.Options{}), "A")
		k.Apply(store.Event{Kind: store.Acquired, Key: "x", Owner: "B", Epoch: 5})
		if got := k.LeaderOf("x"); got != "B" {
			t.Fatalf("after B's acquisition was pushed the leader is %q, want B", got)
		}
		k.Apply(store.Event{Kind: store.Acquired, Key: "x", Owner: "C", Epoch: 4}) // late
		k.Apply(store.Event{Kind: store.Released, Key: "x", Owner: "B", Epoch: 4}) // an older term
		if got := k.LeaderOf("x"); got != "B" {
			t.Fatalf("events about older terms moved the leader to %q", got)
		}
		k.Apply(store.Event{Kind: store.Released, Key: "x", Owner: "B", Epoch: 5})
		if l, ok := k.Observed("x"); !ok || l.Live || !l.Released || l.Epoch != 5 {
			t.Fatalf("after B's release was pushed: %+v, %v; want released", l, ok)
		}
		k.Apply(store.Event{Kind: store.Acquired, Key: "x", Owner: "A", Epoch: 6}) // our own
		if l, _ := k.Observed("x"); l.Owner == "A" {
			t.Fatal("the view took this replica's own acquisition for a peer's")
		}
		// An acquisition lasts a TTL in the view unless something vouches for it.
		k.Apply(store.Event{Kind: store.Acquired, Key: "y", Owner: "B", Epoch: 1})
		time.Sleep(timing.TTL)
		if k.PeerLeads("y") {
			t.Fatal("a pushed acquisition nothing vouched for was still live a TTL later")
		}
	})
}

func TestAMembershipVouchesForItsHoldersOtherTerms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		pruned := &prunedList{Store: st}
		a, b := newKeeper(pruned, "A"), newKeeper(st, "B")
		ctx := context.Background()
		mustAcquire(t, b, "m/B")
		mustAcquire(t, b, "p/1")
		mustAcquire(t, b, "gone/1")
		if err := a.ObserveAll(ctx, ""); err != nil {
			t.Fatal(err)
		}
		follows := func(key string) bool { return strings.HasPrefix(key, "p/") }
		for range 6 { // a minute of B renewing, A reading the memberships only
			time.Sleep(timing.RenewEvery)
			if _, err := b.RenewAll(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if lapsed, err := a.ObserveVouching(ctx, "m/", follows); err != nil || lapsed {
				t.Fatalf("lapsed %v, %v; want no lapse", lapsed, err)
			}
		}
		if !a.PeerLeads("p/1") {
			t.Fatal("B's pool key aged out of A's view although B's membership stayed live")
		}
		if a.PeerLeads("gone/1") {
			t.Fatal("a key outside what the membership vouches for stayed live without a read")
		}

		// B stops: its membership expires and takes its keys with it.
		time.Sleep(timing.TTL)
		if lapsed, err := a.ObserveVouching(ctx, "m/", follows); err != nil || !lapsed {
			t.Fatalf("the read that found B's membership expired: lapsed %v, %v; want lapsed", lapsed, err)
		}
		if a.PeerLeads("p/1") {
			t.Fatal("B's pool key is live in A's view after B's membership expired")
		}
		inGrace := func() (owners []string) {
			a.LiveOwners(true, func(s hold.Seen) bool {
				if seenKey(s) == "p/1" {
					owners = append(owners, s.Owner)
				}
				return true
			})
			return owners
		}
		if got := inGrace(); len(got) != 1 {
			t.Fatalf("within grace of B's expiry p/1 is held by %v, want B still (no peer may take it)", got)
		}
		time.Sleep(timing.Grace)
		if lapsed, err := a.ObserveVouching(ctx, "m/", follows); err != nil || lapsed {
			t.Fatalf("lapsed %v, %v; want no lapse", lapsed, err)
		}
		if got := inGrace(); len(got) != 0 {
			t.Fatalf("past grace p/1 is still held by %v", got)
		}

		// A membership that is gone from the store leaves the view.
		pruned.key = "m/B"
		if lapsed, err := a.ObserveVouching(ctx, "m/", follows); err != nil || lapsed {
			t.Fatalf("lapsed %v, %v; want no lapse", lapsed, err)
		}
		if _, ok := a.Observed("m/B"); ok {
			t.Fatal("a membership deleted from the store is still in the view")
		}
	})
}

// prunedList is a store from which key was pruned.
type prunedList struct {
	store.Store
	key string
}

func (p *prunedList) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	leases, err := p.Store.List(ctx, prefix)
	return slices.DeleteFunc(leases, func(l store.Lease) bool { return l.Key == p.key }), err
}

// pausedList is a store whose List reads the table, then waits for
// resume before it answers: a read whose answer is older than the events
// pushed meanwhile.
type pausedList struct {
	store.Store
	read, resume chan struct{}
}

func (p pausedList) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	leases, err := p.Store.List(ctx, prefix)
	close(p.read)
	<-p.resume
	return leases, err
}

func TestAnEventPushedDuringAReadIsNotUndoneByTheOlderTableItReturns(t *testing.T) {
	for _, vouching := range []bool{false, true} {
		// A subtest each: synctest.Test does not run on a t that failed.
		t.Run(fmt.Sprintf("vouching=%v", vouching), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := memstore.New(memstore.Options{})
				p := pausedList{Store: st, read: make(chan struct{}), resume: make(chan struct{})}
				a, b := newKeeper(p, "A"), newKeeper(st, "B")
				done := make(chan error)
				go func() {
					if vouching {
						_, err := a.ObserveVouching(context.Background(), "m/", func(string) bool { return true })
						done <- err
					} else {
						done <- a.ObserveAll(context.Background(), "")
					}
				}()
				<-p.read
				res := mustAcquire(t, b, "p/1")
				a.Apply(store.Event{Kind: store.Acquired, Key: "p/1", Owner: "B", Epoch: res.Epoch})
				close(p.resume)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if !a.PeerLeads("p/1") {
					t.Fatalf("vouching=%v: the read undid B's acquisition pushed while it was in flight", vouching)
				}
			})
		})
	}
}

func TestATermSeenExpiredLeavesGraceWithoutAnotherRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(st, "B")
		mustAcquire(t, b, "p/1")
		time.Sleep(timing.TTL + time.Second) // B is gone: p/1 expired a second ago
		if err := a.ObserveAll(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		inGrace := func() bool {
			found := false
			a.LiveOwners(true, func(s hold.Seen) bool { found = found || seenKey(s) == "p/1"; return true })
			return found
		}
		if !inGrace() {
			t.Fatal("a term that expired a second ago is not counted as in grace")
		}
		time.Sleep(timing.Grace) // no read meanwhile: a view that follows events
		if inGrace() {
			t.Fatal("a term seen expired is still in grace a whole grace later: its time left did not age")
		}
	})
}

func TestAPushedRevocationIsOwnedByNobodyAndKeepsTheTermsExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeeper(memstore.New(memstore.Options{}), "A")
		k.Apply(store.Event{Kind: store.Acquired, Key: "x", Owner: "B", Epoch: 5})
		time.Sleep(10 * time.Second)
		k.Apply(store.Event{Kind: store.Acquired, Key: "x", Owner: "", Epoch: 6})
		l, ok := k.Observed("x")
		if !ok || l.Live || l.Owner != "" || l.Epoch != 6 {
			t.Fatalf("after a pushed revocation: %+v, %v; want a term of nobody, not live", l, ok)
		}
		if want := timing.TTL - 10*time.Second; l.TimeLeft != want {
			t.Fatalf("the revoked term's time left is %v, want %v: a revocation keeps the expiry", l.TimeLeft, want)
		}
		if k.LeaderOf("x") != "" || k.PeerLeads("x") {
			t.Fatal("a revoked key still has a leader in the view")
		}
	})
}

func TestLiveOwnersStopsWhenItsCallerHasHadEnough(t *testing.T) {
	st := memstore.New(memstore.Options{})
	a, b := newKeeper(st, "A"), newKeeper(st, "B")
	mustAcquire(t, a, "p/1")
	for _, key := range []string{"p/2", "p/3"} {
		mustAcquire(t, b, key)
	}
	if err := a.ObserveAll(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	var all, first int
	a.LiveOwners(false, func(hold.Seen) bool { all++; return true })
	a.LiveOwners(false, func(hold.Seen) bool { first++; return false })
	if all != 3 || first != 1 {
		t.Fatalf("LiveOwners called back %d times for the whole table and %d times when told to stop; want 3 and 1", all, first)
	}
}
