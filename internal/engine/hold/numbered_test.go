package hold_test

import (
	"context"
	"fmt"
	"runtime"
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
	for _, l := range k.ObservedUnnumberedWhere(func(store.Lease) bool { return true }) {
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
	none := numbering{"p/", nil}                                      // a source that listed nothing for a while
	follows := func(key string) bool { return strings.HasPrefix(key, "p/") }
	// numbered: 0, a plain view; 1, numbered after the first read; 2,
	// numbered before it.
	story := func(t *testing.T, numbered int) (reports []string) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			st := memstore.New(memstore.Options{})
			a, b, c, d := newKeeper(st, "A"), newKeeper(st, "B"), newKeeper(st, "C"), newKeeper(st, "D")
			now := first
			report := func(step string) {
				// ObservedUnnumberedWhere leaves out the numbered keys: in both
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
			if numbered == 2 {
				a.Number(first)
			}
			t4 := mustAcquire(t, d, "p/4")
			if err := d.Release(ctx, hold.Term{Key: "p/4", Epoch: t4.Epoch}); err != nil {
				t.Fatal(err)
			}
			if err := a.ObserveAll(ctx, ""); err != nil {
				t.Fatal(err)
			}
			if numbered == 1 {
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
			if lapsed, err := a.ObserveVouching(ctx, "m/", follows); err != nil || lapsed {
				t.Fatalf("vouching read: lapsed %v, %v", lapsed, err)
			}
			report("after a vouching read")

			if numbered > 0 {
				a.Number(second) // A's p/6 moves from position 5 to 1
			}
			now = second
			report("after renumbering")

			time.Sleep(timing.TTL/2 + time.Second) // B's terms are over; C renewed
			if lapsed, err := a.ObserveVouching(ctx, "m/", follows); err != nil || !lapsed {
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

			a.Apply(store.Event{Kind: store.Acquired, Key: "p/7", Owner: "C", Epoch: 9}) // not in the store
			if numbered > 0 {
				a.Number(none)
			}
			now = none
			report("after the source listed nothing")

			if numbered > 0 {
				a.Number(first) // 2 and 7 come back, 8 leaves
			}
			now = first
			report("after the keys came back")

			reversed := numbering{"p/", slices.Clone(first.keys)}
			slices.Reverse(reversed.keys)
			if numbered > 0 {
				a.Number(reversed)
			}
			now = reversed
			report("after the keys came in another order")

			// A read of the pool's keys themselves: what it does not list
			// (p/7, pushed only) is dropped.
			if _, err := a.ObserveVouching(ctx, "p/", follows); err != nil {
				t.Fatal(err)
			}
			report("after a read of the pool's keys")

			a.Apply(store.Event{Kind: store.Acquired, Key: "p/7", Owner: "C", Epoch: 10})
			if _, err := a.ObserveVouching(ctx, "p/7", follows); err != nil {
				t.Fatal(err)
			}
			report("after a read of one pool key")
		})
		return reports
	}
	plain := story(t, 0)
	for _, numbered := range []int{1, 2} {
		for i, got := range story(t, numbered) {
			if got != plain[i] {
				t.Errorf("a view by lease key answered\n%s\nand the view numbered (%d)\n%s", plain[i], numbered, got)
			}
		}
	}
	if !strings.Contains(plain[0], "p/1=B/true/true") || !strings.Contains(plain[len(plain)-1], "p/2=A/true/true") ||
		!strings.Contains(plain[len(plain)-4], "p/7=C/true/false") || strings.Contains(plain[len(plain)-2], "p/7=") ||
		strings.Contains(plain[len(plain)-1], "p/7=") || !strings.Contains(plain[len(plain)-1], "p/3=C") {
		t.Fatalf("the story did not go as written:\n%s", strings.Join(plain, "\n"))
	}
}

// keeperHeap is the heap that the keeper build makes and keeps, after a
// collection, in bytes.
func keeperHeap(build func() *hold.Keeper) (*hold.Keeper, int64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return k, int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TestTheViewGivesBackTheRoomOfWhatLeftIt: a Go map keeps the room it
// grew to, so a view that held many keys by lease key for a moment must
// copy its map once they are gone from it, whether they were numbered
// (pool by pool, as each pool's source is read) or left the table. Each
// view is measured against one that never held them.
func TestTheViewGivesBackTheRoomOfWhatLeftIt(t *testing.T) {
	ctx := context.Background()
	ms := memstore.New(memstore.Options{})
	var pools []*mapNumbering
	for p := range 4 {
		keys := &mapNumbering{numbering: numbering{prefix: fmt.Sprintf("p%d/", p)}, index: map[string]int{}}
		for i := range 25_000 {
			k := fmt.Sprintf("k%05d", i)
			keys.keys, keys.index[k] = append(keys.keys, k), i
			ms.Put(store.Lease{Key: keys.prefix + k, Owner: "B", Epoch: 1, Live: true, TimeLeft: time.Hour})
		}
		pools = append(pools, keys)
	}
	for i := range 30_000 {
		ms.Put(store.Lease{Key: fmt.Sprintf("s/%05d", i), Owner: "B", Epoch: 1, Live: true, TimeLeft: time.Hour})
	}
	read := func(k *hold.Keeper) {
		if err := k.ObserveAll(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	number := func(k *hold.Keeper) {
		for _, p := range pools {
			k.Number(p)
		}
	}
	t.Run("numbered pool by pool after a whole read", func(t *testing.T) {
		first, firstHeap := keeperHeap(func() *hold.Keeper {
			k := newKeeper(freshStrings{Store: ms}, "A")
			number(k)
			read(k)
			return k
		})
		later, laterHeap := keeperHeap(func() *hold.Keeper {
			k := newKeeper(freshStrings{Store: ms}, "A")
			read(k)
			number(k)
			return k
		})
		if len(later.ObservedKeys()) != 130_000 || len(first.ObservedKeys()) != 130_000 {
			t.Fatal("a view lost keys")
		}
		if laterHeap > firstHeap*5/4 {
			t.Fatalf("numbered after the read, the view takes %.1f MB; numbered before it, %.1f MB",
				float64(laterHeap)/(1<<20), float64(firstHeap)/(1<<20))
		}
	})
	t.Run("most keys left the table", func(t *testing.T) {
		few := func(key string) bool { return strings.HasPrefix(key, "s/00") }
		never, neverHeap := keeperHeap(func() *hold.Keeper {
			k := newKeeper(freshStrings{ms, few}, "A")
			read(k)
			return k
		})
		gone := true
		left, leftHeap := keeperHeap(func() *hold.Keeper {
			k := newKeeper(freshStrings{ms, func(key string) bool { return !gone || few(key) }}, "A")
			gone = false
			read(k)
			gone = true
			read(k)
			return k
		})
		if len(left.ObservedKeys()) != 1000 || len(never.ObservedKeys()) != 1000 {
			t.Fatalf("views of %d and %d keys, want 1,000", len(left.ObservedKeys()), len(never.ObservedKeys()))
		}
		if leftHeap > neverHeap+(1<<20) {
			t.Fatalf("a view of 1,000 keys that held 130,000 takes %.1f MB; one that never did, %.1f MB",
				float64(leftHeap)/(1<<20), float64(neverHeap)/(1<<20))
		}
	})
}
