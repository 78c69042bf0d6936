package balance

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func workers(n int) []Worker {
	var ws []Worker
	for i := range n {
		ws = append(ws, Worker{ID: fmt.Sprintf("w%02d", i), Weight: 1})
	}
	return ws
}

func keysN(n int) []string {
	var ks []string
	for i := range n {
		ks = append(ks, fmt.Sprintf("acct-%05d", i))
	}
	return ks
}

// preferred counts how many keys each worker is preferred for.
func preferred(ws []Worker, keys []string) map[string]int {
	r := newRanker(ws)
	out := map[string]int{}
	for _, k := range keys {
		out[r.ids[r.top(hashString(k))]]++
	}
	return out
}

func TestRendezvousSpreadsKeysEvenlyAndMovesOnlyTheNewWorkersShareOnAJoin(t *testing.T) {
	keys := keysN(10000)
	before, after := newRanker(workers(10)), newRanker(workers(11))
	moved := 0
	for _, k := range keys {
		h := hashString(k)
		if before.ids[before.top(h)] != after.ids[after.top(h)] {
			moved++
			if after.ids[after.top(h)] != "w10" {
				t.Fatalf("key %s moved between two old workers", k)
			}
		}
	}
	if min := 10000 / 11; math.Abs(float64(moved-min)) > 0.15*float64(min) {
		t.Fatalf("%d keys moved on a join, want about %d", moved, min)
	}
	for w, n := range preferred(workers(11), keys) {
		if math.Abs(float64(n)-10000.0/11) > 0.1*10000/11 {
			t.Errorf("%s preferred for %d keys, fair is %d", w, n, 10000/11)
		}
	}
}

func TestWeightsScaleTheShareOfPreferredKeys(t *testing.T) {
	ws := []Worker{{ID: "small", Weight: 1}, {ID: "big", Weight: 3}}
	got := preferred(ws, keysN(20000))
	if ratio := float64(got["big"]) / float64(got["small"]); ratio < 2.7 || ratio > 3.3 {
		t.Fatalf("weight 3 vs 1 gave %v (ratio %.2f)", got, ratio)
	}
}

func TestANewWorkerClaimsItsPreferredKeysAndOthersHandThemOver(t *testing.T) {
	now := time.Unix(1000, 0)
	keys := keysN(1000)
	ws := workers(10)
	owner := map[string]string{}
	r := newRanker(ws)
	for _, k := range keys {
		owner[k] = r.ids[r.top(hashString(k))]
	}
	ws = append(ws, Worker{ID: "new", Weight: 1})
	// The newcomer claims nothing held, but its preferred keys are handed
	// over by the old holders, a few per round.
	newPlan := NewBalanced(Config{}).Plan(View{Self: "new", Now: now, Workers: ws, Keys: keys, Owner: owner})
	if len(newPlan.Claim) != 0 || newPlan.Target != 91 {
		t.Fatalf("newcomer plan %+v", newPlan)
	}
	old := NewBalanced(Config{})
	held := map[string]time.Time{}
	for k, o := range owner {
		if o == "w00" {
			held[k] = now.Add(-time.Hour)
		}
	}
	p := old.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keys, Owner: owner, HeldSince: held})
	r11 := newRanker(ws)
	for _, k := range p.Release {
		if r11.ids[r11.top(hashString(k))] != "new" {
			t.Fatalf("w00 released %s, which the newcomer does not prefer", k)
		}
	}
	if len(p.Release) == 0 || len(p.Release) > int(math.Ceil(0.1*float64(len(held)))) {
		t.Fatalf("w00 handed over %d of %d keys, want a rate-limited few", len(p.Release), len(held))
	}
}

func TestKeysHeldForLessThanMinHoldAreNotHandedOver(t *testing.T) {
	now := time.Unix(1000, 0)
	keys := keysN(200)
	ws := workers(2)
	owner, held := map[string]string{}, map[string]time.Time{}
	for _, k := range keys {
		owner[k], held[k] = "w00", now // just claimed everything
	}
	p := NewBalanced(Config{}).Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keys, Owner: owner, HeldSince: held})
	// Above the cap (110) it sheds, but never hands a fresh key to its
	// preferred worker for balance alone.
	if len(p.Release) != 200-p.Cap {
		t.Fatalf("released %d, want exactly the %d above the cap", len(p.Release), 200-p.Cap)
	}
}

func TestOrphansAreClaimedAfterTheDelayUpToTheCap(t *testing.T) {
	now := time.Unix(1000, 0)
	keys := keysN(100)
	ws := workers(4)
	b := NewBalanced(Config{OrphanDelay: 2 * time.Second})
	first := b.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keys, Owner: map[string]string{}})
	pref := preferred(ws, keys)["w00"]
	if len(first.Claim) != min(pref, first.Cap) {
		t.Fatalf("first round claims %d, want only the %d preferred keys", len(first.Claim), pref)
	}
	later := b.Plan(View{Self: "w00", Now: now.Add(2 * time.Second), Workers: ws, Keys: keys, Owner: map[string]string{}})
	if len(later.Claim) != later.Cap {
		t.Fatalf("after the orphan delay claims %d, want the cap %d", len(later.Claim), later.Cap)
	}
}

func TestADrainingWorkerClaimsNothing(t *testing.T) {
	ws := []Worker{{ID: "a", Weight: 1, Draining: true}, {ID: "b", Weight: 1}}
	p := NewBalanced(Config{}).Plan(View{Self: "a", Now: time.Unix(0, 0), Workers: ws, Keys: keysN(10), Owner: map[string]string{}})
	if len(p.Claim) != 0 {
		t.Fatalf("draining worker claims %v", p.Claim)
	}
}

// Preferences follow a worker's name, not its per-start id: a restarted
// worker is preferred for the same keys as before, and two workers given
// one name settle every tie the same way on every worker, whatever order
// they are listed in.
func TestPreferencesFollowTheNameAndTiesGoToTheLowerID(t *testing.T) {
	keys := keysN(2000)
	before := []Worker{{ID: "a#00000001", Name: "a", Weight: 1}, {ID: "b#00000002", Name: "b", Weight: 1}}
	restarted := []Worker{{ID: "a#ffffffff", Name: "a", Weight: 1}, {ID: "b#00000002", Name: "b", Weight: 1}}
	r1, r2 := newRanker(before), newRanker(restarted)
	for _, k := range keys {
		h := hashString(k)
		if r1.top(h) != r2.top(h) {
			t.Fatalf("key %s changed hands when a restarted", k)
		}
	}
	for _, weight := range []float64{1, 2} {
		twins := []Worker{{ID: "x#2", Name: "x", Weight: weight}, {ID: "x#1", Name: "x", Weight: weight}, {ID: "y#3", Name: "y", Weight: 1}}
		swapped := []Worker{twins[1], twins[0], twins[2]}
		ra, rb := newRanker(twins), newRanker(swapped)
		for _, k := range keys {
			h := hashString(k)
			a, b := ra.ids[ra.top(h)], rb.ids[rb.top(h)]
			if a != b || a == "x#2" {
				t.Fatalf("key %s goes to %s or %s depending on order; a tie goes to x#1", k, a, b)
			}
		}
	}
}

// Weights as large as a float holds still share the keys: their sum must
// not overflow and leave every share zero.
func TestHugeWeightsStillShareTheKeys(t *testing.T) {
	got := Shares(Config{}, []Worker{{ID: "a", Weight: 1e308}, {ID: "b", Weight: 1e308}}, 10)
	if got["a"].Fair != 5 || got["b"].Fair != 5 || got["a"].Cap != 6 {
		t.Errorf("shares %+v: want 5 each, cap 6", got)
	}
}
