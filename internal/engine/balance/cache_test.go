package balance

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// churn is a pool that changes at random between rounds: workers join,
// leave, drain and change weight, some sharing a name; keys come and go
// from the source, at its ends, in the middle, reordered, repeated,
// reread as fresh strings or one replaced; owners change behind the
// planning worker's back, which carries out its own plans.
type churn struct {
	rng     *rand.Rand
	self    string
	now     time.Time
	workers []Worker
	keys    []string
	owner   map[string]string
	held    map[string]time.Time
	nextID  int
	nextKey int
}

func newChurn(seed uint64, self string) *churn {
	c := &churn{rng: rand.New(rand.NewPCG(seed, 1)), self: self, now: time.Unix(1000, 0),
		owner: map[string]string{}, held: map[string]time.Time{}}
	c.workers = append(c.workers, Worker{ID: self, Name: "self", Weight: 1, MaxKeys: 60})
	for range 4 {
		c.join()
	}
	for range 150 {
		c.keys = append(c.keys, c.newKey())
	}
	return c
}

func (c *churn) newKey() string {
	c.nextKey++
	return fmt.Sprintf("key-%d", c.nextKey)
}

func (c *churn) join() {
	c.nextID++
	w := Worker{ID: fmt.Sprintf("w%03d", c.nextID), Weight: 1}
	switch c.rng.IntN(4) {
	case 0: // a twin of a worker already in the pool: every key a tie
		w.Name = c.workers[c.rng.IntN(len(c.workers))].Name
	case 1: // hashed by ID
	default:
		w.Name = "n" + w.ID
	}
	c.workers = append(c.workers, w)
}

// step changes the pool a little and returns this round's view.
func (c *churn) step() View {
	c.now = c.now.Add(time.Duration(c.rng.IntN(4000)) * time.Millisecond)
	switch c.rng.IntN(12) {
	case 0:
		c.join()
	case 1:
		if len(c.workers) > 2 {
			i := 1 + c.rng.IntN(len(c.workers)-1)
			c.workers = slices.Delete(c.workers, i, i+1)
		}
	case 2:
		i := c.rng.IntN(len(c.workers))
		c.workers[i].Draining = !c.workers[i].Draining
	case 3:
		c.workers[c.rng.IntN(len(c.workers))].Weight = []float64{1, 1, 2, 0.5, 0, math.Inf(1)}[c.rng.IntN(6)]
		c.workers[c.rng.IntN(len(c.workers))].MaxKeys = []int{0, 60, 20}[c.rng.IntN(3)]
	case 4:
		for i := range c.workers {
			c.workers[i].Weight = 1
		}
	case 5: // rarely, the view of another worker, or nonsense: a worker listed twice, or of weight NaN
		if c.rng.IntN(4) == 0 {
			w := c.workers[c.rng.IntN(len(c.workers))]
			w.Name += "'"
			c.workers = append(c.workers, w)
		} else if c.rng.IntN(4) == 0 {
			c.workers[c.rng.IntN(len(c.workers))].Weight = math.NaN()
		} else if c.rng.IntN(4) == 0 {
			c.self = c.workers[c.rng.IntN(len(c.workers))].ID
		}
	}
	c.changeKeys()
	c.changeOwners()
	ws := slices.Clone(c.workers)
	c.rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	return View{Self: c.self, Now: c.now, Workers: ws, Keys: c.keys, Owners: ownersOf(c.keys, c.owner), HeldSince: maps(c.held)}
}

func maps[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (c *churn) changeKeys() {
	n := len(c.keys)
	switch c.rng.IntN(14) {
	case 0: // appended
		c.keys = append(slices.Clip(c.keys), c.newKey(), c.newKey())
	case 1: // inserted in the middle
		c.keys = slices.Insert(slices.Clone(c.keys), c.rng.IntN(n+1), c.newKey())
	case 2: // removed
		if n > 10 {
			i := c.rng.IntN(n - 5)
			c.keys = slices.Delete(slices.Clone(c.keys), i, i+1+c.rng.IntN(5))
		}
	case 3: // reordered
		c.keys = slices.Clone(c.keys)
		c.rng.Shuffle(n, func(i, j int) { c.keys[i], c.keys[j] = c.keys[j], c.keys[i] })
	case 8: // a stretch in the middle reordered, one key of it replaced
		if n > 20 {
			c.keys = slices.Clone(c.keys)
			mid := c.keys[5 : n-5]
			c.rng.Shuffle(len(mid), func(i, j int) { mid[i], mid[j] = mid[j], mid[i] })
			mid[c.rng.IntN(len(mid))] = c.newKey()
		}
	case 4: // read afresh: equal strings, new memory
		fresh := make([]string, n)
		for i, k := range c.keys {
			fresh[i] = strings.Clone(k)
		}
		c.keys = fresh
	case 5: // one replaced where it stood
		if n > 0 {
			c.keys = slices.Clone(c.keys)
			c.keys[c.rng.IntN(n)] = c.newKey()
		}
	case 6: // listed twice
		if n > 0 {
			c.keys = append(slices.Clone(c.keys), c.keys[c.rng.IntN(n)])
		}
	case 7: // a key that left comes back
		c.keys = append(slices.Clone(c.keys), fmt.Sprintf("key-%d", 1+c.rng.IntN(c.nextKey)))
	}
}

// changeOwners lets leases expire, and other workers (some gone) take free
// keys, some no longer in the source.
func (c *churn) changeOwners() {
	for range c.rng.IntN(6) {
		k := fmt.Sprintf("key-%d", 1+c.rng.IntN(c.nextKey))
		switch c.rng.IntN(3) {
		case 0:
			delete(c.owner, k)
			delete(c.held, k)
		default:
			if _, taken := c.owner[k]; !taken {
				c.owner[k] = fmt.Sprintf("w%03d", c.rng.IntN(c.nextID+2))
			}
		}
	}
}

// carryOut applies the worker's plan, as the engine would.
func (c *churn) carryOut(p Plan) {
	for _, k := range p.Release {
		delete(c.owner, k)
		delete(c.held, k)
	}
	for _, k := range p.Claim {
		if _, taken := c.owner[k]; !taken {
			c.owner[k], c.held[k] = c.self, c.now
		}
	}
}

func TestPlansWithTheCacheAreThoseComputedFromScratch(t *testing.T) {
	cfg := Config{OrphanDelay: 2 * time.Second, MinHold: 5 * time.Second}
	for seed := range uint64(8) {
		c := newChurn(seed, "w000")
		cached, scratch := NewBalanced(cfg), NewBalanced(cfg)
		for round := range 400 {
			v := c.step()
			scratch.cache = keyCache{}
			got, want := cached.Plan(v), scratch.Plan(v)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d round %d: cached plan\n%+v\nfrom scratch\n%+v", seed, round, got, want)
			}
			c.carryOut(got)
		}
	}
}

func TestARankingDoesNotDependOnTheOrderWorkersAreListedIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var ws []Worker
		for i := range 2 + rng.IntN(8) {
			w := Worker{ID: fmt.Sprintf("w%d", i), Name: fmt.Sprintf("n%d", rng.IntN(4)), Weight: 1}
			switch rng.IntN(12) {
			case 0, 1, 2:
				w.Weight = []float64{0.5, 2, 3}[rng.IntN(3)]
			case 3: // listed twice, under another name
				ws = append(ws, Worker{ID: w.ID, Name: "twin", Weight: w.Weight})
			case 4:
				w.Weight = math.NaN()
			}
			ws = append(ws, w)
		}
		rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
		var c keyCache
		canon, given := c.canonical(ws), ws
		self := ws[rng.IntN(len(ws))].ID
		for _, k := range keysN(300) {
			a, b := rankOf(canon, self, k), rankOf(given, self, k)
			if a != b {
				t.Fatalf("key %s ranks %+v sorted, %+v as listed: %+v", k, a, b, ws)
			}
		}
	}
}

type ranking struct {
	pref      string
	preferred bool
	rank      uint32
}

// rankOf is what Plan takes from a key's ranking.
func rankOf(ws []Worker, self, key string) ranking {
	r := newRanker(ws)
	h := hashString(key)
	me := slices.Index(r.ids, self)
	top := r.top(h)
	return ranking{r.ids[top], top == me, r.rank(h, me)}
}

func TestKeysThatLeaveTheSourceLeaveTheCache(t *testing.T) {
	now := time.Unix(1000, 0)
	ws := workers(3)
	b := NewBalanced(Config{})
	b.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keysN(10000)})
	few := keysN(10)
	p := b.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: few})
	if len(b.cache.keys) != 10 || cap(b.cache.entries) != 10 || len(b.orphanSince.M) > 10 {
		t.Fatalf("after the source shrank to 10 keys the cache holds %d keys (room for %d), %d orphans",
			len(b.cache.keys), cap(b.cache.entries), len(b.orphanSince.M))
	}
	owner := map[string]string{}
	for _, k := range p.Claim {
		owner[k] = "w00"
	}
	// Held above its cap by the other workers' absence, it gives keys up;
	// once they leave the source they are forgotten.
	held := map[string]time.Time{}
	for _, k := range few {
		owner[k], held[k] = "w00", now.Add(-time.Hour)
	}
	p = b.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: few, Owners: ownersOf(few, owner), HeldSince: held})
	if len(b.gaveUp.M) == 0 {
		t.Fatalf("released nothing: %+v", p)
	}
	b.Plan(View{Self: "w00", Now: now, Workers: ws, Keys: keysN(1)})
	for k := range b.gaveUp.M {
		if k != few[0] {
			t.Errorf("still remembers giving up %s, gone from the source", k)
		}
	}
}

// A million keys cost the cache 8 MB beside the keys themselves.
func TestACacheEntryIsEightBytes(t *testing.T) {
	if n := unsafe.Sizeof(keyEntry{}); n != 8 {
		t.Errorf("a cache entry is %d bytes", n)
	}
}

// Two keys may share this worker's rank (ranker.rank); which of them is
// shed or claimed first must not depend on the order the source lists
// them in.
func TestKeysOfOneRankAreOrderedByKey(t *testing.T) {
	ws := workers(3)
	c := keyCache{}
	c.rankAll("w00", c.canonical(ws), nil)
	first := make(map[uint32]string)
	for i := range 1_000_000 {
		key := fmt.Sprintf("k%07d", i)
		r := c.rank(key).rank
		other, tied := first[r]
		if !tied {
			first[r] = key
			continue
		}
		for _, order := range [][]string{{other, key}, {key, other}} {
			held := []heldKey{{key: order[0], myRank: r}, {key: order[1], myRank: r}}
			slices.SortFunc(held, byRankDesc)
			if held[0].key != other {
				t.Fatalf("keys %s and %s, both of rank %v, listed as %v: sorted %s first", other, key, r, order, held[0].key)
			}
		}
		return
	}
	t.Fatal("no two of a million keys tie: the test finds nothing to check")
}

// A worker above its cap sheds the keys it is least preferred for, at any
// finite positive weight: a score kept rounded to a float32 was +Inf for
// every key at weight 1e40, and the worker shed by key name instead.
func TestAWorkerOfAnExtremeWeightShedsItsLeastPreferredKeys(t *testing.T) {
	for _, weight := range []float64{1e40, 1e-40, 1} {
		ws := []Worker{{ID: "w00", Weight: weight, MaxKeys: 100}, {ID: "w01", Weight: 2 * weight, MaxKeys: 100}}
		keys := keysN(1000)
		owner := map[string]string{}
		for _, k := range keys {
			owner[k] = "w00"
		}
		b := NewBalanced(Config{})
		p := b.Plan(View{Self: "w00", Now: time.Unix(1000, 0), Workers: ws, Keys: keys, Owners: ownersOf(keys, owner)})
		released := make(map[string]bool)
		for _, k := range p.Release {
			released[k] = true
		}
		// The keys it keeps are those of its highest scores among the
		// keys it prefers, in full precision.
		r := newRanker(ws)
		var preferred []string
		for _, k := range keys {
			if r.ids[r.top(hashString(k))] == "w00" {
				preferred = append(preferred, k)
			}
		}
		slices.SortFunc(preferred, func(a, b string) int {
			return -cmp.Compare(r.value(hashString(a), 0), r.value(hashString(b), 0))
		})
		for _, k := range preferred[:min(100, len(preferred))] {
			if released[k] {
				t.Fatalf("weight %g: released %s, one of its 100 most preferred keys; kept %d", weight, k, len(keys)-len(p.Release))
			}
		}
	}
}
