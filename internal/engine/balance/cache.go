package balance

import (
	"math"
	"slices"
	"strings"
)

// keyCache keeps, for each of the source's keys, what depends only on the
// key and the active workers: its preferred worker and this worker's score
// for it. Ranking a key costs a hash per worker, and the workers change far
// less often than rounds come, so a plan ranks a key again only when the
// source lists it anew, or when the worker it preferred leaves; a worker
// that joins costs each key a comparison with it (followWorkers).
//
// It is a slice parallel to View.Keys rather than a map by key: the source
// lists its keys in a stable order, so a round finds each key's entry by
// position and only checks that the key is the same, which costs a pointer
// comparison while the engine passes the same strings. A map would cost a
// hash of every key every round, and nearly twice the memory.
type keyCache struct {
	// self and workers are what the entries were ranked for; workers are
	// in canonical order, which entry.top indexes; me is self's index.
	self    string
	workers []Worker
	ranks   *ranker
	me      int

	// keys is View.Keys as last synced, shared with the caller, who
	// replaces it rather than writing to it (View.Keys).
	keys    []string
	entries []keyEntry

	scratch []Worker // canonical's, reused each round

	// ranked counts the keys ranked against every worker, what a
	// worker-set change is meant to spare; tests read it.
	ranked int
}

// keyEntry is 8 bytes, all a key costs the cache: the keys are the
// caller's. The key's hash is not kept: only a worker-set change
// uses it, and there rehashing a short key costs about what its two pair
// hashes on a join do, a few milliseconds at a million keys against the
// plan's hundred and more, while keeping it would double the cache.
//
// This worker's score for the key is kept as its rank (ranker.rank): the
// score only orders this worker's own keys (which to shed or hand over
// first, which free key to claim first), and the rank orders them the
// same in 4 bytes, where the score took 8 (16 with padding: 80 bytes more
// per held key on a pool of ten workers). Which worker a key prefers is
// decided on the full scores (top).
type keyEntry struct {
	rank uint32 // this worker's rank for the key: higher is more preferred
	top  int32  // the preferred worker: an index into keyCache.workers
}

// sync brings the entries up to date with this round's active workers,
// self among them, and the source's keys, and reports whether the keys
// differ from the previous sync's.
func (c *keyCache) sync(self string, active []Worker, keys []string) (keysChanged bool) {
	ws := c.canonical(active)
	same := c.ranks != nil && self == c.self && slices.EqualFunc(ws, c.workers, sameRanking)
	if !same && !c.followWorkers(self, ws) {
		return c.rankAll(self, ws, keys)
	}
	// followWorkers moved the entries of the keys last synced to the new
	// workers, so the keys the source lists anew are ranked against those.
	return c.syncKeys(keys)
}

// rankAll ranks every key against every worker, for a first sync and for
// the worker-set changes followWorkers leaves to it.
func (c *keyCache) rankAll(self string, ws []Worker, keys []string) (keysChanged bool) {
	c.self, c.workers = self, slices.Clone(ws)
	c.ranks = newRanker(c.workers)
	c.me = slices.IndexFunc(c.workers, func(w Worker) bool { return w.ID == self })
	keysChanged = !slices.Equal(c.keys, keys)
	if len(c.entries) != len(keys) {
		c.entries = make([]keyEntry, len(keys))
	}
	c.keys = keys
	for i, key := range c.keys {
		c.entries[i] = c.rank(key)
	}
	return keysChanged
}

// canonical orders the active workers by ID. The engine lists them in no
// particular order, a fresh one each round, and a key's ranking does not
// depend on it: a tie goes to the lower ID, or between entries of one ID
// to the first listed, which a stable sort keeps first. A NaN weight is
// the exception, as it compares unequal to everything: then the given
// order is kept, as ranking always has.
func (c *keyCache) canonical(active []Worker) []Worker {
	ws := append(c.scratch[:0], active...)
	if !slices.ContainsFunc(ws, func(w Worker) bool { return math.IsNaN(w.Weight) }) {
		slices.SortStableFunc(ws, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	}
	c.scratch = ws
	return ws
}

// sameRanking reports whether two workers rank every key the same.
func sameRanking(a, b Worker) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Weight == b.Weight
}

// syncKeys follows a change of the source's keys, ranking only the keys it
// has not ranked before. It matches the common prefix and suffix in place,
// which covers keys appended or removed at one spot, and what remains by a
// map, which covers any reordering.
func (c *keyCache) syncKeys(keys []string) (changed bool) {
	old := c.keys
	n := min(len(old), len(keys))
	p := 0
	for p < n && old[p] == keys[p] {
		p++
	}
	if p == len(old) && p == len(keys) {
		// The same keys, perhaps read afresh: keep the caller's slice so
		// the previous read's can be freed, and so the next round's check
		// compares pointers.
		c.keys = keys
		return false
	}
	s := 0
	for s < n-p && old[len(old)-1-s] == keys[len(keys)-1-s] {
		s++
	}
	entries := make([]keyEntry, len(keys))
	copy(entries, c.entries[:p])
	copy(entries[len(keys)-s:], c.entries[len(old)-s:])
	oldMid := old[p : len(old)-s]
	idx := make(map[string]int, len(oldMid))
	for j, key := range oldMid {
		idx[key] = p + j
	}
	for i := p; i < len(keys)-s; i++ {
		if j, ok := idx[keys[i]]; ok {
			entries[i] = c.entries[j]
		} else {
			entries[i] = c.rank(keys[i])
		}
	}
	c.keys, c.entries = keys, entries
	return true
}

// rank ranks a key against every worker.
func (c *keyCache) rank(key string) keyEntry {
	c.ranked++
	kh := hashString(key)
	return keyEntry{rank: c.ranks.rank(kh, c.me), top: int32(c.ranks.top(kh))}
}
