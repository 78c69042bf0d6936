package hold_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A term its owner stopped renewing (a release that failed) expires in
// the store while its owner's membership stays live. Once a whole read has
// seen it end, a membership read must not make it live again: it would
// stay "held" in every follower's view, and in its owner's own, for as
// long as the owner lives.
func TestAVouchNeverRevivesATermAWholeReadSawEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(&flakyRelease{Store: st, fail: true}, "B")
		ctx := context.Background()
		mustAcquire(t, b, "m/B")
		mustAcquire(t, b, "p/1")
		term, _ := b.Term("p/1")
		if err := b.Release(ctx, term); err == nil {
			t.Fatal("release reached the store")
		}
		follows := func(key string) bool { return strings.HasPrefix(key, "p/") }
		for range 5 { // 50s: B renews its membership, p/1 expires and passes grace
			time.Sleep(timing.RenewEvery)
			if _, err := b.RenewAll(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.ObserveAll(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if l, _ := a.Observed("p/1"); l.Live || l.TimeLeft > -timing.Grace {
			t.Fatalf("the whole read should see p/1 expired past grace: %+v", l)
		}
		if _, err := a.ObserveVouching(ctx, "m/", follows); err != nil {
			t.Fatal(err)
		}
		if a.PeerLeads("p/1") {
			l, _ := a.Observed("p/1")
			t.Errorf("A: after the membership read p/1 is live again (%+v), though the store says it expired %v ago", l, -listed(t, st, "p/1").TimeLeft)
		}
		// B's own view: its own membership vouches for the term it gave up.
		if err := b.ObserveAll(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ObserveVouching(ctx, "m/", follows); err != nil {
			t.Fatal(err)
		}
		var owners []string
		b.LiveOwners(true, func(s hold.Seen) bool {
			if seenKey(s) == "p/1" {
				owners = append(owners, s.Owner)
			}
			return true
		})
		if len(owners) != 0 {
			t.Errorf("B: believes p/1 is held by %v after giving it up", owners)
		}
	})
}

func listed(t *testing.T, st store.Store, key string) store.Lease {
	t.Helper()
	ls, err := st.List(context.Background(), key)
	if err != nil || len(ls) == 0 {
		t.Fatalf("list %s: %v %v", key, ls, err)
	}
	return ls[0]
}

// flakyRelease is a store whose releases fail while fail is set (a reset
// connection): the term stays in the store and expires on its own.
type flakyRelease struct {
	store.Store
	fail bool
}

func (f *flakyRelease) Release(ctx context.Context, owner string, terms []store.Term) error {
	if f.fail {
		return errUnreachable
	}
	return f.Store.Release(ctx, owner, terms)
}

func TestAFailedReleaseIsSentAgainUntilTheStoreAnswersOrTheTermIsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		flaky := &flakyRelease{Store: st, fail: true}
		k := newKeeper(flaky, "A")
		ctx := context.Background()
		mustAcquire(t, k, "x")
		mustAcquire(t, k, "y")
		x, _ := k.Term("x")
		y, _ := k.Term("y")
		if err := k.Release(ctx, x, y); err == nil {
			t.Fatal("the release reached a store that fails them")
		}
		if _, err := k.RetryReleases(ctx); err == nil || k.Unreleased() != 2 {
			t.Fatalf("a retry against a failing store: %v, %d left; want an error and both kept", err, k.Unreleased())
		}
		mustAcquire(t, k, "y") // held again: a newer term, the old one is over
		if k.Unreleased() != 1 {
			t.Fatalf("%d terms to release again after y was acquired anew, want 1", k.Unreleased())
		}
		flaky.fail = false
		released, err := k.RetryReleases(ctx)
		if err != nil || len(released) != 1 || released[0].Key != "x" || k.Unreleased() != 0 {
			t.Fatalf("a retry once the store answers: %v, %v, %d left; want x released", released, err, k.Unreleased())
		}
		if l := listed(t, st, "x"); !l.Released {
			t.Fatalf("x after the retry: %+v, want released", l)
		}
		if l := listed(t, st, "y"); !l.Live {
			t.Fatalf("y after the retry: %+v; the retry must not end its newer term", l)
		}

		// A term whose time is over is dropped, not sent.
		flaky.fail = true
		mustAcquire(t, k, "z")
		zt, _ := k.Term("z")
		if err := k.Release(ctx, zt); err == nil {
			t.Fatal("the release reached a store that fails them")
		}
		time.Sleep(timing.TTL + timing.CallTimeout + timing.Grace + time.Second)
		if released, err := k.RetryReleases(ctx); err != nil || len(released) != 0 || k.Unreleased() != 0 {
			t.Fatalf("a retry of a term long over: %v, %v, %d left; want it dropped without a call", released, err, k.Unreleased())
		}
	})
}
