package hold_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// freshStrings answers every List with strings of its own, as a store
// across the network does; with keep, only the leases keep accepts.
type freshStrings struct {
	store.Store
	keep func(key string) bool
}

func (f freshStrings) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	leases, err := f.Store.List(ctx, prefix)
	kept := leases[:0]
	for _, l := range leases {
		if f.keep == nil || f.keep(l.Key) {
			l.Key, l.Owner = strings.Clone(l.Key), strings.Clone(l.Owner)
			kept = append(kept, l)
		}
	}
	return kept, err
}

func TestAWholeReadReplacesTheViewAgesItsTermsAndKeepsOneStringPerOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(freshStrings{Store: st}, "A"), newKeeper(st, "B")
		ctx := context.Background()
		for _, key := range []string{"p/1", "p/2", "p/3"} {
			mustAcquire(t, b, key)
		}
		a.Apply(store.Event{Kind: store.Acquired, Key: "x", Owner: "C", Epoch: 1}) // never in the store
		if err := a.ObserveAll(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.Observed("x"); ok {
			t.Fatal("a whole read kept a term it did not list")
		}
		time.Sleep(time.Second)
		l1, ok1 := a.Observed("p/1")
		l3, ok3 := a.Observed("p/3")
		if !ok1 || !ok3 || l1.Owner != "B" || !l1.Live || !l1.Running || l1.Epoch != 1 || l1.Key != "p/1" || l1.TimeLeft != timing.TTL-time.Second {
			t.Fatalf("observed %+v, %v; want B's live term, aged by a second", l1, ok1)
		}
		if unsafe.StringData(l1.Owner) != unsafe.StringData(l3.Owner) {
			t.Error("the view keeps a copy of the owner per key, not one per owner")
		}

		term, _ := b.Term("p/2")
		if err := b.Release(ctx, term); err != nil {
			t.Fatal(err)
		}
		if err := a.ObserveAll(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if l, ok := a.Observed("p/2"); !ok || l.Live || !l.Released {
			t.Fatalf("after B released p/2 a whole read shows %+v, %v; want released", l, ok)
		}
		if l, ok := a.Observed("p/1"); !ok || l.TimeLeft != timing.TTL-time.Second {
			t.Fatalf("a second whole read shows p/1 as %+v, %v; want it read anew", l, ok)
		}
	})
}

func TestAWholeReadOfManyChunksReplacesTheWholeView(t *testing.T) {
	st := memstore.New(memstore.Options{})
	a := newKeeper(freshStrings{Store: st}, "A")
	ctx := context.Background()
	const n = 2500 // more than two of the chunks a read writes under one lock
	for i := range n {
		st.Put(store.Lease{Key: fmt.Sprintf("p/%04d", i), Owner: fmt.Sprint("w", i%3), Epoch: 1, TimeLeft: time.Hour})
	}
	mustAcquire(t, a, "mine")
	if err := a.ObserveAll(ctx, "p/"); err != nil {
		t.Fatal(err)
	}
	if got := len(a.ObservedKeys()); got != n {
		t.Fatalf("after a whole read of %d leases the view has %d", n, got)
	}
	if err := a.ObserveAll(ctx, "p/1"); err != nil { // now lists p/1000 to p/1999 alone
		t.Fatal(err)
	}
	keys := a.ObservedKeys()
	if len(keys) != 1000 || keys[0] != "p/1000" || keys[999] != "p/1999" {
		t.Fatalf("a read of 1000 leases left %d in view, %v to %v", len(keys), keys[0], keys[len(keys)-1])
	}
	if !a.Holds("mine") {
		t.Fatal("whole reads changed what this replica holds")
	}
}
