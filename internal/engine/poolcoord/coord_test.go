package poolcoord

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

func newCoord(t *testing.T, self string) *Coordinator {
	t.Helper()
	c, err := New(Config{Prefix: "app/", Pool: "mail", Self: self, Weight: 1, Policy: balance.NewBalanced(balance.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func tableOf(entries ...Entry) iter.Seq[Entry] { return slices.Values(entries) }

func member(owner, weight string) Entry {
	return Entry{Key: "app/~workers/mail/" + owner + "@" + weight, Owner: owner, Live: true, Running: true}
}

func TestTheLayoutIsThePoolsNamespace(t *testing.T) {
	c := newCoord(t, "w1")
	want := poolkey.Member{Prefix: "app/", Pool: "mail", Owner: "w1", Weight: 1}.Key()
	if got := c.MemberKey(); got != want {
		t.Errorf("MemberKey = %q, want %q", got, want)
	}
	if _, _, err := c.SetKeys([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{
		"app/~pool/mail/a":        true,
		"app/~pool/mail/c":        false, // not in the source
		"app/~pool/other/a":       false, // another pool's key of the same name
		"a":                       false, // a singleton
		"app/~workers/mail/w2@1":  true,
		"app/~workers/other/w2@1": false,
	} {
		if got := c.Concerns(key); got != want {
			t.Errorf("Concerns(%q) = %v, want %v", key, got, want)
		}
	}
	if k, ok := c.PoolKey(c.LeaseKey("b")); !ok || k != "b" {
		t.Errorf("PoolKey(LeaseKey(b)) = %q, %v", k, ok)
	}
}

func TestASourceIsDeduplicatedAndABadReadKeepsTheLastGoodSet(t *testing.T) {
	c := newCoord(t, "w1")
	if c.Loaded() {
		t.Fatal("loaded before any read")
	}
	dups, newDups, err := c.SetKeys([]string{"a", "b", "a", "a"})
	if err != nil || dups != 2 || !newDups {
		t.Fatalf("SetKeys = %d, %v, %v; want 2 repeats, newly", dups, newDups, err)
	}
	if _, newDups, _ := c.SetKeys([]string{"a", "b", "a", "a"}); newDups {
		t.Error("the same repeats reported twice")
	}
	if _, _, err := c.SetKeys([]string{"ok", ""}); !errors.Is(err, store.ErrInvalidKey) {
		t.Fatalf("SetKeys with an empty key: %v", err)
	}
	if !c.Wants(c.LeaseKey("b")) || c.Wants(c.LeaseKey("ok")) {
		t.Error("a failed read replaced the key set")
	}
	if st := c.Status(tableOf()); st.Keys != 2 || st.Error == nil {
		t.Errorf("Status = %+v; want 2 keys and the read's error", st)
	}
}

func TestAWorkerClaimsOnlyOnceSettledAndCountsKeysInGraceAsOwned(t *testing.T) {
	c := newCoord(t, "w1")
	now := time.Unix(1_700_000_000, 0)
	if r := plan(c, now, Self{Member: true, Settled: true}, tableOf(member("w1", "1"))); len(r.Claim) != 0 {
		t.Fatalf("planned %v before the source was read", r.Claim)
	}
	keys := []string{"a", "b", "c", "d"}
	if _, _, err := c.SetKeys(keys); err != nil {
		t.Fatal(err)
	}
	table := tableOf(member("w1", "1"),
		// b's holder crashed and is in grace: not free.
		Entry{Key: "app/~pool/mail/b", Owner: "gone", Live: false, Running: true},
		// The same name in another pool says nothing about this one.
		Entry{Key: "app/~pool/other/c", Owner: "x", Live: true, Running: true})
	if r := plan(c, now, Self{Member: true}, table); len(r.Claim) != 0 {
		t.Fatalf("claimed %v before membership settled", r.Claim)
	}
	r := plan(c, now, Self{Member: true, Settled: true}, table)
	want := []string{"app/~pool/mail/a", "app/~pool/mail/c", "app/~pool/mail/d"}
	got := slices.Clone(r.Claim)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Claim = %v, want %v (b is blocked by its holder's grace)", r.Claim, want)
	}
}

func TestAMalformedPeerIsIgnoredAndReportedOnce(t *testing.T) {
	c := newCoord(t, "w1")
	if _, _, err := c.SetKeys([]string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	table := tableOf(member("w1", "1"), member("w2", "Inf"), member("w3", "NaN"))
	r := plan(c, now, Self{Member: true, Settled: true}, table)
	slices.Sort(r.Malformed)
	if want := []string{"app/~workers/mail/w2@Inf", "app/~workers/mail/w3@NaN"}; !slices.Equal(r.Malformed, want) {
		t.Errorf("Malformed = %v, want %v", r.Malformed, want)
	}
	if len(r.Claim) != 4 {
		t.Errorf("claimed %d of 4 keys; malformed peers must not take a share", len(r.Claim))
	}
	if r := plan(c, now, Self{Member: true, Settled: true}, table); len(r.Malformed) != 0 {
		t.Errorf("reported again: %v", r.Malformed)
	}
}

func TestAWorkerWithoutItsMembershipClaimsNothing(t *testing.T) {
	c := newCoord(t, "w1")
	if _, _, err := c.SetKeys([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	held := Entry{Key: "app/~pool/mail/a", Owner: "w1", Live: true, Running: true}
	since := func(string) (time.Time, bool) { return now.Add(-time.Hour), true }
	table := tableOf(member("w1", "1"), held)
	if r := plan(c, now, Self{Member: false, Settled: true, HeldSince: since}, table); len(r.Claim) != 0 {
		t.Errorf("Claim = %v; a worker that lost its membership is draining", r.Claim)
	}
	if r := plan(c, now, Self{Member: true, Settled: true, HeldSince: since}, table); len(r.Claim) == 0 {
		t.Error("claimed nothing as a member with a free key; the test proves nothing")
	}
	st := c.Status(tableOf(member("w1", "1"), member("w2", "1"), held))
	if st.Held != 1 || st.Workers["w1"] != 1 || st.Workers["w2"] != 0 || len(st.Workers) != 2 {
		t.Errorf("Status = %+v", st)
	}
}

// plan plans c's round from table as the engine does: Begin, Observe each
// entry, Finish.
func plan(c *Coordinator, now time.Time, self Self, table iter.Seq[Entry]) Round {
	p := c.Begin(now, self)
	if p == nil {
		return Round{}
	}
	for e := range table {
		p.Observe(e)
	}
	return p.Finish()
}

// The holder's view names a pool's key by its position in an index: the
// pool's current one, one the pool has since replaced, or another pool's.
// Each entry counts for the key it names, and only in that key's pool.
func TestAnEntryByPositionCountsForTheKeyItNames(t *testing.T) {
	c := newCoord(t, "w1")
	if _, _, err := c.SetKeys([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	old := c.Index()
	if _, _, err := c.SetKeys([]string{"c", "d", "a"}); err != nil { // b left, d came, a and c moved
		t.Fatal(err)
	}
	other, err := New(Config{Prefix: "app/", Pool: "other", Self: "w1", Weight: 1, Policy: balance.NewBalanced(balance.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.SetKeys([]string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	at := func(x *Index, k string) Entry {
		i, ok := x.Find(k)
		if !ok {
			t.Fatalf("%q is not in the index", k)
		}
		return Entry{Index: x, At: i, Live: true, Running: true}
	}
	e := func(e Entry, owner string) Entry { e.Owner = owner; return e }
	st := c.Status(tableOf(
		member("w1", "1"), member("w2", "1"), member("w3", "1"),
		e(at(c.Index(), "d"), "w1"), // the current index
		e(at(old, "a"), "w2"),       // the replaced index: a is still the pool's
		e(at(old, "b"), "w3"),       // the replaced index: b left the pool
		e(at(other.Index(), "c"), "w3"),
	))
	if want := map[string]int{"w1": 1, "w2": 1, "w3": 0}; !maps.Equal(st.Workers, want) || st.Held != 1 {
		t.Fatalf("Status counts %v, %d held; want %v, 1 held", st.Workers, st.Held, want)
	}
}

// A source read again that lists the same keys keeps the index, so the
// holder's view and the policy's ranking stay as they are.
func TestTheSameKeysReadAgainKeepTheIndex(t *testing.T) {
	c := newCoord(t, "w1")
	if _, _, err := c.SetKeys([]string{"a", "b", "b"}); err != nil {
		t.Fatal(err)
	}
	first := c.Index()
	if _, _, err := c.SetKeys([]string{"a", "a", "b"}); err != nil || c.Index() != first {
		t.Fatalf("the same keys read again made a new index (%v)", err)
	}
	if _, _, err := c.SetKeys([]string{"b", "a"}); err != nil || c.Index() == first || c.Index().Key(0) != "b" {
		t.Fatalf("keys in a new order kept the old index (%v)", err)
	}
}

// The plan sees owners by number: the keys this worker holds are those it
// is asked the acquisition time of, and owners that left the table leave
// the numbering, though every restart of a worker brings a new owner id.
func TestOwnersAreNumberedAfreshEachRound(t *testing.T) {
	c := newCoord(t, "w1")
	if _, _, err := c.SetKeys([]string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for round := range 100 {
		peer := fmt.Sprintf("w2-restart%d", round)
		var asked []string
		self := Self{Member: true, Settled: true, HeldSince: func(key string) (time.Time, bool) {
			asked = append(asked, key)
			return now, true
		}}
		r := plan(c, now, self, tableOf(member("w1", "1"), member(peer, "1"),
			Entry{Key: "app/~pool/mail/a", Owner: peer, Live: true, Running: true},
			Entry{Key: "app/~pool/mail/b", Owner: "w1", Live: true, Running: true},
			Entry{Key: "app/~pool/mail/c", Owner: peer, Live: true, Running: true},
			Entry{Key: "app/~pool/mail/d", Owner: "w1", Live: true, Running: true}))
		slices.Sort(asked)
		if want := []string{"app/~pool/mail/b", "app/~pool/mail/d"}; !slices.Equal(asked, want) {
			t.Fatalf("round %d: asked when %v were acquired, want %v", round, asked, want)
		}
		if len(r.Claim) != 0 {
			t.Fatalf("round %d: claimed %v, all held", round, r.Claim)
		}
	}
	if n := len(c.numbers.IDs()); n > 2 {
		t.Errorf("%d owners numbered after 100 rounds of two owners each", n)
	}
}
