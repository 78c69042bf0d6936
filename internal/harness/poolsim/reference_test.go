package poolsim

import (
	"slices"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

func members(ids ...string) []balance.Worker {
	var ws []balance.Worker
	for _, id := range ids {
		ws = append(ws, balance.Worker{ID: id, Weight: 1})
	}
	return ws
}

func TestReferenceClaimsFreeKeysInItsOwnStableOrderUpToItsMax(t *testing.T) {
	keys := Keys(100)
	now := time.Unix(1000, 0)
	plan := func(self string) []string {
		p := NewReference(ReferenceConfig{MaxAccountsPerWorker: 30}).Plan(balance.View{
			Self: self, Now: now, Workers: members("a", "b"), Keys: keys,
			Owners: balance.OwnersOf([]string{"b", "b"}),
		})
		return p.Claim
	}
	a := plan("a")
	if len(a) != 30 {
		t.Fatalf("claimed %d keys, want the max 30", len(a))
	}
	if slices.Contains(a, keys[0]) || slices.Contains(a, keys[1]) {
		t.Fatalf("claimed a key a peer holds: %v", a)
	}
	if again := plan("a"); !slices.Equal(a, again) {
		t.Fatalf("the same worker scanned in a different order:\n%v\n%v", a, again)
	}
	if b := plan("b"); slices.Equal(a, b) {
		t.Fatal("two workers scanned in the same order")
	}
}

func TestReferenceShedsItsNewestClaimsAboveTheThresholdOncePerInterval(t *testing.T) {
	keys := Keys(100)
	start := time.Unix(1000, 0)
	ws := members("a", "b")
	ref := NewReference(ReferenceConfig{})
	owner := map[string]string{}
	held := map[string]time.Time{}
	// a holds 60 keys from long ago, then claims the 40 free ones.
	for _, k := range keys[:60] {
		owner[k], held[k] = "a", start.Add(-time.Hour)
	}
	p := ref.Plan(balance.View{Self: "a", Now: start, Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
	if len(p.Claim) != 40 || len(p.Release) != 0 {
		t.Fatalf("first plan claims %d and releases %d, want 40 and 0", len(p.Claim), len(p.Release))
	}
	for _, k := range p.Claim {
		owner[k], held[k] = "a", start
	}
	view := func(at time.Time) balance.View {
		return balance.View{Self: "a", Now: at, Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held}
	}
	if p := ref.Plan(view(start.Add(59 * time.Second))); len(p.Release) != 0 {
		t.Fatalf("shed %d keys before its first rebalance", len(p.Release))
	}
	p2 := ref.Plan(view(start.Add(60 * time.Second)))
	threshold := Threshold(100, 2) // int(50·1.2)+5 = 65
	if threshold != 65 || len(p2.Release) != 100-threshold {
		t.Fatalf("threshold %d, shed %d, want 65 and 35", threshold, len(p2.Release))
	}
	if want := p.Claim[40-35:]; !slices.Equal(p2.Release, want) {
		t.Fatalf("shed %v,\nwant the 35 newest claims %v", p2.Release, want)
	}
}

func TestReferenceThresholdLeavesANewcomerIdleAtFairShare(t *testing.T) {
	// 1,000 keys on 11 workers: fair 91, but no one sheds below 114.
	if got := Threshold(1000, 11); got != 114 {
		t.Fatalf("Threshold(1000, 11) = %d, want 114", got)
	}
	if got := Threshold(10000, 11); got != 1095 {
		t.Fatalf("Threshold(10000, 11) = %d, want 1095", got)
	}
}

func TestReferenceClaimsNothingWhenNotAMember(t *testing.T) {
	p := NewReference(ReferenceConfig{}).Plan(balance.View{Self: "a", Now: time.Unix(0, 0), Workers: members("b"), Keys: Keys(10)})
	if len(p.Claim) != 0 {
		t.Fatalf("a non-member claims %v", p.Claim)
	}
}

// ownersOf lays out a map of owners by key as balance.View.Owners.
func ownersOf(keys []string, owner map[string]string) balance.Owners {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = owner[k]
	}
	return balance.OwnersOf(out)
}
