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

// numbering numbers keys under prefix in the order given.
type numbering struct {
	prefix string
	keys   []string
}

func (n numbering) Prefix() string   { return n.prefix }
func (n numbering) Len() int         { return len(n.keys) }
func (n numbering) Key(i int) string { return n.keys[i] }
func (n numbering) Find(key string) (int, bool) {
	i := slices.Index(n.keys, key)
	return i, i >= 0
}

// seenKey is the lease key of a lease LiveOwners reports.
func seenKey(s hold.Seen) string {
	if s.Keys != nil {
		return s.Keys.Prefix() + s.Keys.Key(s.At)
	}
	return s.Key
}

// viewReport is everything a keeper answers about its view, in one string
// that two keepers' views can be compared by.
func viewReport(k *hold.Keeper, keys []string, numbered func(key string) bool) string {
	var b strings.Builder
	for _, inGrace := range []bool{false, true} {
		var seen []string
		k.LiveOwners(inGrace, func(s hold.Seen) bool {
			seen = append(seen, fmt.Sprintf("%s=%s/%v/%v", seenKey(s), s.Owner, s.Live, s.Running))
			return true
		})
		slices.Sort(seen)
		fmt.Fprintf(&b, "live owners (in grace %v): %v\n", inGrace, seen)
	}
	fmt.Fprintf(&b, "peer keys: %v\nobserved keys: %v\n", k.PeerKeys(), k.ObservedKeys())
	var released, where []string
	for _, l := range k.Released() {
		released = append(released, fmt.Sprintf("%+v", l))
	}
	for _, l := range k.ObservedWhere(func(store.Lease) bool { return true }) {
		if !numbered(l.Key) {
			where = append(where, fmt.Sprintf("%+v", l))
		}
	}
	slices.Sort(released)
	slices.Sort(where)
	fmt.Fprintf(&b, "released: %v\nobserved where: %v\n", released, where)
	for _, key := range keys {
		l, ok := k.Observed(key)
		fmt.Fprintf(&b, "%s: %+v %v, leader %q\n", key, l, ok, k.LeaderOf(key))
	}
	return b.String()
}

// TestANumberedViewAnswersAsAViewByLeaseKey plays one story twice, once
// with a plain view and once with the pool's keys numbered (renumbered
// halfway, as a source that changes does), and wants the same answers
// after each step: reads, pushed events, a vouching read, an acquisition,
// a member that dies.
func TestANumberedViewAnswersAsAViewByLeaseKey(t *testing.T) {
	keys := []string{"p/1", "p/2", "p/3", "p/4", "p/5", "p/6", "p/7", "p/8", "m/B", "m/C", "x"}
	first := numbering{"p/", []string{"1", "2", "3", "4", "5", "6", "7"}}
	second := numbering{"p/", []string{"8", "6", "5", "4", "3", "1"}} // 2 and 7 left, 8 came
	story := func(t *testing.T, numbered bool) (reports []string) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			st := memstore.New(memstore.Options{})
			a, b, c, d := newKeeper(st, "A"), newKeeper(st, "B"), newKeeper(st, "C"), newKeeper(st, "D")
			now := first
			report := func(step string) {
				// ObservedWhere leaves out the numbered keys: in both
				// views, the keys compared are the others.
				in := func(key string) bool {
					rest, ok := strings.CutPrefix(key, "p/")
					_, found := now.Find(rest)
					return ok && found
				}
				reports = append(reports, step+":\n"+viewReport(a, keys, in))
			}
			for _, key := range []string{"p/1", "p/2", "m/B", "p/8"} {
				mustAcquire(t, b, key)
			}
			for _, key := range []string{"p/3", "m/C", "x"} {
				mustAcquire(t, c, key)
			}
			mustAcquire(t, a, "p/6")
			t4 := mustAcquire(t, d, "p/4")
			if err := d.Release(ctx, hold.Term{Key: "p/4", Epoch: t4.Epoch}); err != nil {
				t.Fatal(err)
			}
			if err := a.ObserveAll(ctx, ""); err != nil {
				t.Fatal(err)
			}
			if numbered {
				a.Number(first)
			}
			report("after a whole read")

			a.Apply(store.Event{Kind: store.Acquired, Key: "p/5", Owner: "C", Epoch: 3})
			a.Apply(store.Event{Kind: store.Released, Key: "p/1", Owner: "B", Epoch: 1})
			a.Apply(store.Event{Kind: store.Acquired, Key: "p/7", Owner: "", Epoch: 2})
			report("after pushed events")

			time.Sleep(timing.TTL / 2)
			if _, err := c.RenewAll(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if lapsed, err := a.ObserveVouching(ctx, "m/", func(key string) bool { return strings.HasPrefix(key, "p/") }); err != nil || lapsed {
				t.Fatalf("vouching read: lapsed %v, %v", lapsed, err)
			}
			report("after a vouching read")

			if numbered {
				a.Number(second)
			}
			now = second
			report("after renumbering")

			time.Sleep(timing.TTL/2 + time.Second) // B's terms are over; C renewed
			if lapsed, err := a.ObserveVouching(ctx, "m/", func(key string) bool { return strings.HasPrefix(key, "p/") }); err != nil || !lapsed {
				t.Fatalf("vouching read after B died: lapsed %v, %v; want lapsed", lapsed, err)
			}
			report("after B died")

			time.Sleep(timing.Grace)
			mustAcquire(t, a, "p/2")
			if res, err := a.Acquire(ctx, "p/3", true); err != nil || res.OK {
				t.Fatalf("A took C's p/3: %+v, %v", res, err)
			}
			report("after A's acquisitions")

			if err := a.ObserveAll(ctx, ""); err != nil {
				t.Fatal(err)
			}
			report("after a second whole read")
		})
		return reports
	}
	plain, numbered := story(t, false), story(t, true)
	for i := range plain {
		if plain[i] != numbered[i] {
			t.Errorf("a view by lease key answered\n%s\nand the numbered view\n%s", plain[i], numbered[i])
		}
	}
	if !strings.Contains(plain[0], "p/1=B/true/true") || !strings.Contains(plain[len(plain)-1], "p/2=A/true/true") {
		t.Fatalf("the story did not go as written:\n%s", strings.Join(plain, "\n"))
	}
}
