package poolcoord

import "hash/maphash"

// Index is the pool's keys without repeats, in the source's order, and
// where each one is. Every round looks up the key of every lease in the
// table, so finding one must be quick; and a worker keeps the index of
// all the pool's keys, not only its share, so it must be small. A
// map[string]int32 slot holds a string header beside the position, and
// at 100,000 keys the map was 3.4 MB of a worker's heap. This is an
// open-addressing table of positions into keys, 4 bytes a slot, filled
// to between 2/5 and 4/5: about 0.5 MB at 100,000 keys.
//
// An Index never changes once SetKeys has made it, so the holder's view
// can keep its observations of the pool's keys by their positions in it
// (hold.Numbering), without a string or map entry per key of its own.
type Index struct {
	prefix string // the pool's keys' lease keys start with it
	keys   []string
	seed   maphash.Seed
	slots  []int32 // 1 + the position in keys of the key stored here; 0: empty
}

// newIndex returns an empty index of the keys under prefix, with room for
// n keys.
func newIndex(prefix string, n int) *Index {
	size := 1
	for size < n+n/4+1 {
		size <<= 1
	}
	return &Index{prefix: prefix, keys: make([]string, 0, n), seed: maphash.MakeSeed(), slots: make([]int32, size)}
}

// add appends k unless the index has it, and reports whether it did.
// It must not be called more often than the room newIndex made.
func (x *Index) add(k string) bool {
	i := x.slot(k)
	if x.slots[i] != 0 {
		return false
	}
	x.keys = append(x.keys, k)
	x.slots[i] = int32(len(x.keys))
	return true
}

// Prefix is what the lease key of every key of the pool starts with.
func (x *Index) Prefix() string { return x.prefix }

// Len is how many keys the pool has.
func (x *Index) Len() int { return len(x.keys) }

// Key is the pool's key at position i.
func (x *Index) Key(i int) string { return x.keys[i] }

// Find reports the position of k.
func (x *Index) Find(k string) (int, bool) {
	if x == nil || len(x.slots) == 0 {
		return 0, false
	}
	p := x.slots[x.slot(k)]
	return int(p) - 1, p != 0
}

// slot is where k is stored, or the empty slot where it would be.
func (x *Index) slot(k string) int {
	mask := len(x.slots) - 1
	for i := int(maphash.String(x.seed, k)) & mask; ; i = (i + 1) & mask {
		if p := x.slots[i]; p == 0 || x.keys[p-1] == k {
			return i
		}
	}
}
