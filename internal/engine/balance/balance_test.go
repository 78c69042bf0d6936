package balance

import (
	"fmt"
	"math"
	"runtime"
	"slices"
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

// ownersOf lays out a map of owners by key as View.Owners.
func ownersOf(keys []string, owner map[string]string) Owners {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = owner[k]
	}
	return OwnersOf(out)
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
	newPlan := NewBalanced(Config{}).Plan(View{Self: "new", Now: now, Workers: ws, Keys: keys, Owners: ownersOf(keys, owner)})
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
	p := old.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
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
	p := NewBalanced(Config{}).Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
	// Above the cap (110) it sheds, but never hands a fresh key to its
	// preferred worker for balance alone.
	if len(p.Release) != 200-p.Cap {
		t.Fatalf("released %d, want exactly the %d above the cap", len(p.Release), 200-p.Cap)
	}
}

// An orphan goes first to the workers under their target, and only up to
// it: every one of them sees the delay end at about the same instant, and
// when each took up to its cap the ones past their target handed the
// surplus on again. A worker at its target takes the rest after twice the
// delay, up to its cap.
func TestOrphansAreClaimedAfterTheDelayUpToTheTargetThenTheCap(t *testing.T) {
	now := time.Unix(1000, 0)
	keys := keysN(400)
	ws := workers(4)
	// The worker preferred for the fewest keys, fewer than its target.
	self, pref := "", len(keys)
	for id, n := range preferred(ws, keys) {
		if n < pref {
			self, pref = id, n
		}
	}
	b := NewBalanced(Config{OrphanDelay: 2 * time.Second})
	first := b.Plan(View{Self: self, Now: now, Workers: ws, Keys: keys})
	if len(first.Claim) != min(pref, first.Cap) || pref >= first.Target {
		t.Fatalf("first round claims %d, want only the %d preferred keys (fewer than the target %d, for this test)", len(first.Claim), pref, first.Target)
	}
	owner := map[string]string{}
	held := map[string]time.Time{}
	hold := func(ks []string) {
		for _, k := range ks {
			owner[k], held[k] = self, now
		}
	}
	hold(first.Claim)
	later := b.Plan(View{Self: self, Now: now.Add(2 * time.Second), Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
	if len(later.Claim) != later.Target-pref {
		t.Fatalf("under its target after the orphan delay, claims %d; want the %d up to the target", len(later.Claim), later.Target-pref)
	}
	hold(later.Claim)
	at := b.Plan(View{Self: self, Now: now.Add(3 * time.Second), Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
	if len(at.Claim) != 0 {
		t.Fatalf("at its target before twice the delay, claims %d; want none", len(at.Claim))
	}
	last := b.Plan(View{Self: self, Now: now.Add(4 * time.Second), Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
	if len(last.Claim) != last.Cap-last.Target {
		t.Fatalf("at its target after twice the delay, claims %d; want the %d up to the cap", len(last.Claim), last.Cap-last.Target)
	}
}

func TestADrainingWorkerClaimsNothing(t *testing.T) {
	ws := []Worker{{ID: "a", Weight: 1, Draining: true}, {ID: "b", Weight: 1}}
	p := NewBalanced(Config{}).Plan(View{Self: "a", Now: time.Unix(0, 0), Workers: ws, Keys: keysN(10)})
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

func TestPreferredNamesTheWorkerThePolicyClaimsEachKeyFor(t *testing.T) {
	ws := workers(7)
	ws[3].Weight = 2
	keys := keysN(2000)
	pref := Preferred(ws, keys)
	for _, w := range ws {
		// Room for every key, and no orphan claims yet: a worker claims
		// exactly the free keys it is preferred for.
		p := NewBalanced(Config{Epsilon: 10}).Plan(View{Self: w.ID, Now: time.Unix(0, 0), Workers: ws, Keys: keys})
		var want []string
		for i, k := range keys {
			if pref[i] == w.ID {
				want = append(want, k)
			}
		}
		slices.Sort(p.Claim)
		slices.Sort(want)
		if !slices.Equal(p.Claim, want) {
			t.Fatalf("%s claims %d keys, Preferred gives it %d", w.ID, len(p.Claim), len(want))
		}
	}
}

// A worker whose MaxKeys is below its weighted share gets MaxKeys, and the
// rest of the keys are shared among the others by weight. When it kept a
// fair share above what it may hold, it stayed under its target for good:
// the others handed it keys, it shed them above its cap, and they moved
// round and round (1,600 moves in ten minutes at 1,100 keys).
func TestAShareAboveMaxKeysGoesToTheOthers(t *testing.T) {
	ws := workers(11)
	ws[0].Weight = 2 // a fair share of 1,100 × 2/12 = 183, above MaxKeys
	ws[0].MaxKeys = 150
	ws[1].MaxKeys = 200 // above its share: no effect
	shares := Shares(Config{}, ws, 1100)
	if s := shares["w00"]; s.Fair != 150 || s.Cap != 150 {
		t.Errorf("w00: %+v, want fair share and cap 150 (its MaxKeys)", s)
	}
	sum := 0.0
	for _, w := range ws[1:] {
		s := shares[w.ID]
		if s.Fair != 95 || s.Cap != 105 {
			t.Errorf("%s: %+v, want fair share 95 (the 950 keys left over ten) and cap 105", w.ID, s)
		}
		sum += s.Fair
	}
	if sum+shares["w00"].Fair != 1100 {
		t.Errorf("fair shares add up to %v, want the 1,100 keys", sum+shares["w00"].Fair)
	}
	// Every worker capped: each holds MaxKeys, and the keys beyond stay
	// unowned, as no worker may hold them.
	for i := range ws {
		ws[i].MaxKeys = 50
	}
	for id, s := range Shares(Config{}, ws, 1100) {
		if s.Fair != 50 || s.Cap != 50 {
			t.Errorf("all capped, %s: %+v, want 50 and 50", id, s)
		}
	}
}

// The orphans a worker under its target may take are chosen by its count
// before the round's claims, and so is the limit: when its free preferred
// keys bring it to the target, it takes no orphan at the shorter delay,
// where it went on up to its cap.
func TestPreferredKeysThatReachTheTargetLeaveTheOrphansToOthers(t *testing.T) {
	now := time.Unix(1000, 0)
	keys := keysN(400)
	ws := workers(4)
	r := newRanker(ws)
	// The worker preferred for the fewest keys, fewer than its target.
	self, target, fewest := "", 100, len(keys)
	for id, n := range preferred(ws, keys) {
		if n < fewest {
			self, fewest = id, n
		}
	}
	b := NewBalanced(Config{OrphanDelay: 2 * time.Second})
	b.Plan(View{Self: self, Now: now, Workers: ws, Keys: keys}) // the orphans' clocks start
	// It holds 97 keys, three short of its target: all its preferred keys
	// but five, which are free, and keys it does not prefer.
	var mine, others []string
	for _, k := range keys {
		if ws[r.top(hashString(k))].ID == self {
			mine = append(mine, k)
		} else {
			others = append(others, k)
		}
	}
	if len(mine) < 5 || len(mine)-5 > target-3 {
		t.Fatalf("%s prefers %d keys; the test needs 5 to %d", self, len(mine), target+2)
	}
	owner := map[string]string{}
	held := map[string]time.Time{}
	for _, k := range append(mine[5:], others[:target-3-(len(mine)-5)]...) {
		owner[k], held[k] = self, now.Add(-time.Hour)
	}
	p := b.Plan(View{Self: self, Now: now.Add(2 * time.Second), Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held})
	if p.Target != target || len(held) != target-3 {
		t.Fatalf("target %d holding %d, want %d holding %d", p.Target, len(held), target, target-3)
	}
	if len(p.Claim) != 5 {
		t.Errorf("claims %d: want only its 5 free preferred keys, which bring it past its target (cap %d); no orphans", len(p.Claim), p.Cap)
	}
}

// TestForgottenOrphansGiveBackTheirRoom: a worker that left makes
// thousands of keys orphans at once, and its peers track each until one
// claims it. A Go map keeps the room it grew to, so the tracking of one
// such moment stayed allocated for good (90 bytes a key on every worker).
func TestForgottenOrphansGiveBackTheirRoom(t *testing.T) {
	const n = 50_000
	keys := keysN(n)
	owners := make([]string, n)
	ws := workers(2)
	b := NewBalanced(Config{OrphanDelay: time.Hour})
	now := time.Unix(1000, 0)
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	b.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keys, Owners: OwnersOf(owners)}) // every key free: each tracked
	if len(b.orphanSince.M) != n {
		t.Fatalf("%d keys tracked as orphans, want %d", len(b.orphanSince.M), n)
	}
	tracking := heap()
	for i := range owners {
		owners[i] = "w01"
	}
	b.Plan(View{Self: "w00", Now: now.Add(time.Second), Workers: ws, Keys: keys, Owners: OwnersOf(owners)})
	if len(b.orphanSince.M) != 0 {
		t.Fatalf("%d keys still tracked once w01 holds them all", len(b.orphanSince.M))
	}
	after := heap()
	runtime.KeepAlive(b) // and its view: only what the plans kept may go
	runtime.KeepAlive(keys)
	// The plans' spare slices free about 45 bytes a key; the tracking map
	// another 70 or so, which stayed allocated before.
	if freed := int64(tracking) - int64(after); freed < n*60 {
		t.Errorf("%d bytes freed once the %d orphans were claimed, want at least %d", freed, n, n*60)
	}
}

// A number Owners.IDs has no owner for means no owner, for the plan's
// counts as for View.Owner, rather than a panic in the engine's loop.
func TestAnOwnerNumberWithoutAnOwnerIsNoOwner(t *testing.T) {
	keys := keysN(4)
	v := View{Self: "w00", Now: time.Unix(1000, 0), Workers: workers(2), Keys: keys,
		Owners: Owners{Of: []int32{-1, 7, 1, 0}, IDs: []string{"w01"}}}
	for i, want := range []string{"", "", "w01", ""} {
		if got := v.Owner(i); got != want {
			t.Errorf("Owner(%d) = %q, want %q", i, got, want)
		}
	}
	p := NewBalanced(Config{}).Plan(v)
	if slices.Contains(p.Claim, keys[2]) {
		t.Errorf("claimed %s, which w01 holds: %v", keys[2], p.Claim)
	}
}
