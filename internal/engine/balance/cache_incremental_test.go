package balance

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// workerChurn changes a worker set at random, in every way the cache must
// follow: joins, leaves, restarts (a new ID under the same name), twins
// sharing a name (every key a tie, won by the lower ID), weights changing
// (which can switch the ranking between raw hashes and weighted scores),
// nonsense (an ID listed twice, a weight of NaN), several workers at once,
// and the planning worker itself changing. IDs are drawn at random, so a
// newcomer's ID is as often below as above the IDs it ties with.
type workerChurn struct {
	rng     *rand.Rand
	self    string
	workers []Worker
}

func (c *workerChurn) newID() string {
	for {
		id := fmt.Sprintf("w%03d", c.rng.IntN(1000))
		if !slices.ContainsFunc(c.workers, func(w Worker) bool { return w.ID == id }) {
			return id
		}
	}
}

func (c *workerChurn) join() {
	w := Worker{ID: c.newID(), Weight: 1}
	switch c.rng.IntN(4) {
	case 0: // a twin
		twin := c.workers[c.rng.IntN(len(c.workers))]
		w.Name = cmp.Or(twin.Name, twin.ID)
	case 1: // hashed by ID
	default:
		w.Name = "n" + w.ID
	}
	if c.rng.IntN(8) == 0 {
		w.Weight = []float64{2, 0.5, math.Inf(1)}[c.rng.IntN(3)]
	}
	c.workers = append(c.workers, w)
}

// other picks a worker at random, or -1 if it picked self, which stays.
func (c *workerChurn) other() int {
	i := c.rng.IntN(len(c.workers))
	if c.workers[i].ID == c.self {
		return -1
	}
	return i
}

func (c *workerChurn) step() {
	if c.rng.IntN(2) == 0 {
		c.clearNonsense()
	}
	switch c.rng.IntN(16) {
	case 0, 1, 2:
		c.join()
	case 3, 4, 5:
		if i := c.other(); i >= 0 && len(c.workers) > 1 {
			c.workers = slices.Delete(c.workers, i, i+1)
		}
	case 6, 7, 8: // a restart: the same name and weight, a new ID
		if i := c.other(); i >= 0 {
			w := c.workers[i]
			if w.Name == "" {
				w.Name = w.ID
			}
			w.ID = c.newID()
			c.workers[i] = w
		}
	case 9:
		c.workers[c.rng.IntN(len(c.workers))].Weight = []float64{1, 1, 2, 0.5, math.Inf(1)}[c.rng.IntN(5)]
	case 10:
		for i := range c.workers {
			c.workers[i].Weight = 1
		}
	case 11: // several at once
		for range 1 + c.rng.IntN(4) {
			c.join()
			if i := c.other(); i >= 0 {
				c.workers = slices.Delete(c.workers, i, i+1)
			}
		}
	case 12: // an ID listed twice, under another name
		w := c.workers[c.rng.IntN(len(c.workers))]
		w.Name += "'"
		c.workers = append(c.workers, w)
	case 13:
		c.workers[c.rng.IntN(len(c.workers))].Weight = math.NaN()
	case 14: // the view of another worker
		c.self = c.workers[c.rng.IntN(len(c.workers))].ID
	case 15: // renamed under the same ID
		c.workers[c.rng.IntN(len(c.workers))].Name += "+"
	}
}

// clearNonsense drops a second listing of an ID, and cures NaN weights,
// as a pool soon would.
func (c *workerChurn) clearNonsense() {
	seen := map[string]bool{}
	c.workers = slices.DeleteFunc(c.workers, func(w Worker) bool {
		dup := seen[w.ID]
		seen[w.ID] = true
		return dup
	})
	for i := range c.workers {
		if math.IsNaN(c.workers[i].Weight) {
			c.workers[i].Weight = 1
		}
	}
}

// listed is the worker set as the engine lists it: in any order, at
// times by ID (then a NaN weight, which keeps the order as listed, sits
// where a sorted list would have it).
func (c *workerChurn) listed() []Worker {
	ws := slices.Clone(c.workers)
	if c.rng.IntN(3) == 0 {
		slices.SortStableFunc(ws, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	} else {
		c.rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	}
	return ws
}

// changeKeys sometimes changes the source's keys in the same round.
func changeKeys(rng *rand.Rand, keys []string, next *int) []string {
	fresh := func() string { *next++; return fmt.Sprintf("key-%d", *next) }
	switch n := len(keys); rng.IntN(8) {
	case 0:
		return append(slices.Clip(keys), fresh(), fresh())
	case 1:
		if n > 10 {
			i := rng.IntN(n - 5)
			return slices.Delete(slices.Clone(keys), i, i+1+rng.IntN(5))
		}
	case 2:
		keys = slices.Clone(keys)
		rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		keys[rng.IntN(n)] = fresh()
	}
	return keys
}

func TestACacheFollowingWorkerChangesMatchesOneBuiltAfresh(t *testing.T) {
	followed, changes := 0, 0
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		wc := &workerChurn{rng: rng}
		for range 6 {
			wc.workers = append(wc.workers, Worker{Weight: 1})
			wc.workers[len(wc.workers)-1].ID = wc.newID()
		}
		wc.self = wc.workers[0].ID
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = fmt.Sprintf("key-%d", i)
		}
		next := len(keys)
		var c keyCache
		c.sync(wc.self, wc.listed(), keys)
		for round := range 300 {
			wc.step()
			prevKeys, prevWorkers, ranked := slices.Clone(c.keys), c.workers, c.ranked
			if rng.IntN(4) == 0 {
				keys = changeKeys(rng, keys, &next)
			}
			ws := wc.listed()
			changed := c.sync(wc.self, ws, keys)
			var fresh keyCache
			fresh.sync(wc.self, ws, keys)
			if changed != !slices.Equal(prevKeys, keys) {
				t.Fatalf("seed %d round %d: keys changed %v, want %v", seed, round, changed, !changed)
			}
			if !slices.EqualFunc(prevWorkers, c.workers, sameRanking) {
				changes++
				if c.ranked-ranked < len(keys) {
					followed++
				}
			}
			compareCaches(t, fmt.Sprintf("seed %d round %d", seed, round), &c, &fresh)
		}
	}
	// Most changes are small enough to follow: if none were, this test
	// would only compare full rankings with full rankings.
	if followed < changes/2 {
		t.Fatalf("only %d of %d worker-set changes were followed without ranking every key", followed, changes)
	}
}

func compareCaches(t *testing.T, at string, got, want *keyCache) {
	t.Helper()
	if got.me != want.me || !slices.Equal(got.keys, want.keys) || len(got.entries) != len(want.entries) {
		t.Fatalf("%s: self at %d, %d keys, %d entries; afresh %d, %d, %d", at,
			got.me, len(got.keys), len(got.entries), want.me, len(want.keys), len(want.entries))
	}
	for i, e := range got.entries {
		w := want.entries[i]
		if e.top != w.top || got.workers[e.top].ID != want.workers[w.top].ID ||
			e.rank != w.rank {
			t.Fatalf("%s: key %s prefers %d (%s) with value %v; afresh %d (%s), %v\nworkers %+v", at, got.keys[i],
				e.top, got.workers[e.top].ID, e.rank, w.top, want.workers[w.top].ID, w.rank, want.workers)
		}
	}
}

func TestAJoinRanksNoKeyAfreshAndALeaveOnlyTheLeaversKeys(t *testing.T) {
	keys := keysN(2000)
	ws := workers(10)
	var c keyCache
	c.sync("w03", ws, keys)
	check := func(what string, ws []Worker, want int) {
		t.Helper()
		ranked := c.ranked
		c.sync("w03", ws, keys)
		if got := c.ranked - ranked; got != want {
			t.Errorf("%s: %d keys ranked against every worker, want %d", what, got, want)
		}
		var fresh keyCache
		fresh.sync("w03", ws, keys)
		compareCaches(t, what, &c, &fresh)
	}
	// keysOf counts the keys whose preferred worker is id.
	keysOf := func(id string) (n int) {
		for _, e := range c.entries {
			if c.workers[e.top].ID == id {
				n++
			}
		}
		return n
	}

	joined := append(slices.Clone(ws), Worker{ID: "w10", Weight: 1})
	check("a join", joined, 0)
	n := keysOf("w05")
	if n == 0 || n > len(keys)/5 {
		t.Fatalf("w05 is preferred for %d of %d keys", n, len(keys))
	}
	left := slices.DeleteFunc(slices.Clone(joined), func(w Worker) bool { return w.ID == "w05" })
	check("a leave", left, n)
	n = keysOf("w07")
	restarted := slices.Clone(left)
	for i, w := range restarted {
		if w.ID == "w07" {
			restarted[i] = Worker{ID: "w11", Name: "w07", Weight: 1}
		}
	}
	check("a restart under the same name", restarted, n)
}

// A NaN weight compares false with every score, so where a full ranking
// meets it decides: listed first, it wins every key. A cache that
// followed the change would keep the keys' preferred workers instead.
func TestAWeightTurningNaNIsRankedAsAfresh(t *testing.T) {
	keys := keysN(500)
	ws := []Worker{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 1}, {ID: "d", Weight: 1}, {ID: "e", Weight: 1}}
	var c keyCache
	c.sync("c", ws, keys)
	ws[0].Weight = math.NaN()
	c.sync("c", ws, keys)
	var fresh keyCache
	fresh.sync("c", ws, keys)
	compareCaches(t, "a NaN listed first", &c, &fresh)
	for i, e := range c.entries {
		if e.top != 0 {
			t.Fatalf("key %s prefers %s, not the NaN-weighted worker listed first", keys[i], c.workers[e.top].ID)
		}
	}
}
