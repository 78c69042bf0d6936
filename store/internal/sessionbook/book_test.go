package sessionbook

import (
	"slices"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

const ttl = time.Minute

func items(terms ...store.Term) []store.RenewItem {
	out := make([]store.RenewItem, len(terms))
	for i, t := range terms {
		out[i] = store.RenewItem{Key: t.Key, Epoch: t.Epoch}
	}
	return out
}

// onSession makes a Book whose session 7 holds terms at version 3.
func onSession(terms ...store.Term) *Book {
	b := &Book{}
	b.Opened("a", ttl, 7, Version{})
	var ts []Term
	for _, t := range terms {
		ts = append(ts, Term{Key: t.Key, Epoch: t.Epoch})
	}
	b.Learned("a", ttl, 7, Version{N: 3, Tag: 33}, ts)
	return b
}

var k1, k2, k3 = store.Term{Key: "k1", Epoch: 1}, store.Term{Key: "k2", Epoch: 1}, store.Term{Key: "k3", Epoch: 1}

func TestARenewalMayGoFastOnlyWithExactlyTheTermsOnTheSession(t *testing.T) {
	b := onSession(k1, k2)
	b.Acquired("a", ttl, "k3", 1, false)
	cases := []struct {
		name  string
		items []store.RenewItem
		fast  bool
	}{
		{"exactly the session's", items(k1, k2), true},
		{"and a term acquired since", items(k1, k2, k3), true},
		{"one left out", items(k1), false},
		{"one named twice", items(k1, k1), false},
		{"an older epoch", items(k1, store.Term{Key: "k2", Epoch: 0}), false},
		{"a term it never saw", items(k1, k2, store.Term{Key: "k4", Epoch: 1}), false},
	}
	for _, c := range cases {
		f, ok := b.Check("a", ttl, c.items)
		if ok != c.fast {
			t.Errorf("%s: fast %t, want %t", c.name, ok, c.fast)
		}
		if ok && (f.ID != 7 || f.Version != Version{N: 3, Tag: 33}) {
			t.Errorf("%s: %+v, want session 7 at version 3", c.name, f)
		}
	}
	if f, _ := b.Check("a", ttl, items(k1, k2, k3)); len(f.Join) != 1 || f.Join[0].Key != "k3" {
		t.Errorf("join %v, want k3", f.Join)
	}
}

func TestVersionsPastAGapMakeTheRenewalGoTermByTerm(t *testing.T) {
	b := onSession(k1, k2, k3)
	b.Left(7, Version{N: 5, Tag: 55, Prev: 44}, k2) // version 4 has not come back
	if _, ok := b.Check("a", ttl, items(k1, k3)); ok {
		t.Fatal("fast with version 4 missing")
	}
	b.Left(7, Version{N: 4, Tag: 44, Prev: 33}, k3)
	f, ok := b.Check("a", ttl, items(k1))
	if !ok || f.Version != (Version{N: 5, Tag: 55}) {
		t.Fatalf("after versions 4 and 5: %+v, fast %t; want fast at version 5", f, ok)
	}
	b.Left(7, Version{N: 5, Tag: 55, Prev: 44}, k1) // a version it knows already changes nothing
	if _, ok := b.Check("a", ttl, items(k1)); !ok {
		t.Fatal("a change replayed at a known version took k1 off")
	}
}

func TestAChangeThatCameBackDuringAFastRenewalForgetsTheSession(t *testing.T) {
	b := onSession(k1)
	b.Acquired("a", ttl, "k2", 1, false)
	f, ok := b.Check("a", ttl, items(k1, k2))
	if !ok {
		t.Fatal("not fast")
	}
	b.Left(7, Version{N: 5, Tag: 55, Prev: 44}, k2) // a release of k2 after the renewal put it on (version 4)
	b.Renewed("a", ttl, f, Version{N: 4, Tag: 44}, map[store.Term]bool{k2: true})
	if _, ok := b.Check("a", ttl, items(k1)); ok {
		t.Fatal("fast although the Book cannot tell whether k2 is on the session")
	}
	b.Learned("a", ttl, 7, Version{N: 5, Tag: 55}, []Term{{Key: "k1", Epoch: 1}})
	if _, ok := b.Check("a", ttl, items(k1)); !ok {
		t.Fatal("not fast once the session was learned again")
	}
}

func TestADeadSessionIsForgotten(t *testing.T) {
	b := onSession(k1)
	b.Dead("a", ttl, 7)
	if b.Session("a", ttl) != 0 {
		t.Fatal("a dead session is still the Book's")
	}
	if _, ok := b.Check("a", ttl, items(k1)); ok {
		t.Fatal("fast on a dead session")
	}
	b.Opened("a", ttl, 8, Version{})
	if _, ok := b.Check("a", ttl, items(k1)); ok {
		t.Fatal("a new session claims the old one's term")
	}
}

// One release that takes several terms off a session moves it one version:
// every one of them leaves the Book.
func TestOneCallTakingSeveralTermsOffLeavesNoneBehind(t *testing.T) {
	b := onSession(k1, k2, k3)
	b.Left(7, Version{N: 4, Tag: 44, Prev: 33}, k1, k2)
	if _, ok := b.Check("a", ttl, items(k2, k3)); ok {
		t.Fatal("fast with k2 listed after it left")
	}
	if f, ok := b.Check("a", ttl, items(k3)); !ok || f.Version != (Version{N: 4, Tag: 44}) {
		t.Fatalf("%+v, fast %t; want k3 alone, fast at version 4", f, ok)
	}
}

// A change whose version follows the Book's but whose tag does not chain
// to the Book's (the change between was lost to a crash, and another made
// since) leaves the session unknown until it is learned again.
func TestAChangeThatDoesNotChainLeavesTheSessionUnknown(t *testing.T) {
	b := onSession(k1, k2, k3)
	b.Left(7, Version{N: 4, Tag: 44, Prev: 99}, k1) // version 3 was not tag 33 for the server
	if _, ok := b.Check("a", ttl, items(k2, k3)); ok {
		t.Fatal("fast on a session whose history the Book cannot vouch for")
	}
	b.Learned("a", ttl, 7, Version{N: 4, Tag: 44}, []Term{{Key: "k2", Epoch: 1}, {Key: "k3", Epoch: 1}})
	if _, ok := b.Check("a", ttl, items(k2, k3)); !ok {
		t.Fatal("not fast once the session was learned again")
	}
}

// A term acquired and then given up before any renewal listed it (lost,
// or left to expire) leaves the Book after two renewals without it; one
// that a renewal lists in time joins as usual.
func TestAPendingTermNoRenewalListsIsForgotten(t *testing.T) {
	b := onSession(k1)
	b.Acquired("a", ttl, "k2", 1, false)
	b.Acquired("a", ttl, "k3", 1, false)
	if _, ok := b.Check("a", ttl, items(k1, k3)); !ok {
		t.Fatal("a renewal of k1 and k3 may not go fast")
	}
	if f, ok := b.Check("a", ttl, items(k1, k2)); !ok || len(f.Join) != 1 || f.Join[0].Key != "k2" {
		t.Fatalf("k2, missed once, does not join: %+v %t", f, ok)
	}
	b.Check("a", ttl, items(k1))
	b.Check("a", ttl, items(k1))
	if _, ok := b.Check("a", ttl, items(k1, k2)); ok {
		t.Fatal("k2, missed twice in a row, is still known: a renewal listing it may go fast")
	}
	if n := len(b.sessions[sessionKey{"a", ttl}].pending); n != 0 {
		t.Fatalf("%d terms still pending; want none", n)
	}
}

// A renewal that writes a runner state and is never confirmed (its reply
// lost) may or may not have written it: the next renewal writes the state
// it lists, even one equal to what the Book last knew, or a runner that
// stopped meanwhile would show running until the session is learned anew.
func TestAnUnconfirmedRunnerStateIsWrittenAgain(t *testing.T) {
	b := onSession(k1)
	running := []store.RenewItem{{Key: "k1", Epoch: 1, Running: true}}
	if f, ok := b.Check("a", ttl, running); !ok || len(f.Changed) != 1 {
		t.Fatalf("a changed runner state is not written: %+v %t", f, ok)
	}
	// No Renewed: the reply was lost.
	if f, ok := b.Check("a", ttl, items(k1)); !ok || len(f.Changed) != 1 || f.Changed[0].Running {
		t.Fatalf("the runner state back to the Book's is not written after an unconfirmed change: %+v %t", f, ok)
	}
	f, _ := b.Check("a", ttl, items(k1))
	b.Renewed("a", ttl, f, Version{N: 3, Tag: 33}, nil)
	if f, ok := b.Check("a", ttl, items(k1)); !ok || len(f.Changed) != 0 {
		t.Fatalf("a confirmed state is written again: %+v %t", f, ok)
	}
}

// A renewal term by term that finds its session dead makes the Book
// forget it and goes again, once, on the session opened then; a second
// dead one fails the renewal rather than loop.
func TestARenewalThatFindsItsSessionDeadGoesOnceMoreOnANewOne(t *testing.T) {
	b := &Book{}
	b.Opened("a", ttl, 7, Version{N: 1, Tag: 1})
	open := func() (int64, error) {
		return b.Open("a", ttl, func() (int64, Version, error) { return 8, Version{N: 1, Tag: 2}, nil })
	}
	var tried []int64
	renewed, err := b.OnLiveSession("a", ttl, open, func(id int64) (map[store.Term]bool, bool, error) {
		tried = append(tried, id)
		return map[store.Term]bool{{Key: "k1", Epoch: 1}: true}, id == 8, nil
	})
	if err != nil || !renewed[store.Term{Key: "k1", Epoch: 1}] || len(tried) != 2 || tried[0] != 7 || tried[1] != 8 {
		t.Fatalf("renewal on sessions %v: %v %v; want 7 (dead), then 8", tried, renewed, err)
	}
	tried = nil
	if _, err := b.OnLiveSession("a", ttl, func() (int64, error) { return 9, nil }, func(id int64) (map[store.Term]bool, bool, error) {
		tried = append(tried, id)
		return nil, false, nil
	}); err == nil || len(tried) != 2 {
		t.Fatalf("two dead sessions: tried %v, error %v; want an error after two", tried, err)
	}
}

// Distinct keeps each term once, where it first came, with the runner
// state it last had.
func TestDistinctKeepsEachTermOnceWithItsLastRunnerState(t *testing.T) {
	got := Distinct([]store.RenewItem{
		{Key: "a", Epoch: 1, Running: true}, {Key: "b", Epoch: 1}, {Key: "a", Epoch: 2}, {Key: "a", Epoch: 1, Running: false},
	})
	want := []store.RenewItem{{Key: "a", Epoch: 1}, {Key: "b", Epoch: 1}, {Key: "a", Epoch: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("Distinct = %v; want %v", got, want)
	}
}
