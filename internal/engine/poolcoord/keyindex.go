package poolcoord

import "hash/maphash"

// keyIndex is the pool's keys without repeats, in the source's order, and
// where each one is. Every round looks up the key of every lease in the
// table, so finding one must be quick; and a worker keeps the index of
// all the pool's keys, not only its share, so it must be small. A
// map[string]int32 slot holds a string header beside the position, and
// at 100,000 keys the map was 3.4 MB of a worker's heap. This is an
// open-addressing table of positions into keys, 4 bytes a slot, filled
// to between 2/5 and 4/5: about 0.5 MB at 100,000 keys.
type keyIndex struct {
	keys  []string
	seed  maphash.Seed
	slots []int32 // 1 + the position in keys of the key stored here; 0: empty
}

// newKeyIndex returns an empty index with room for n keys.
func newKeyIndex(n int) keyIndex {
	size := 1
	for size < n+n/4+1 {
		size <<= 1
	}
	return keyIndex{keys: make([]string, 0, n), seed: maphash.MakeSeed(), slots: make([]int32, size)}
}

// add appends k unless the index has it, and reports whether it did.
// It must not be called more often than the room newKeyIndex made.
func (x *keyIndex) add(k string) bool {
	i := x.slot(k)
	if x.slots[i] != 0 {
		return false
	}
	x.keys = append(x.keys, k)
	x.slots[i] = int32(len(x.keys))
	return true
}

// find reports the position of k.
func (x *keyIndex) find(k string) (int, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	p := x.slots[x.slot(k)]
	return int(p) - 1, p != 0
}

// slot is where k is stored, or the empty slot where it would be.
func (x *keyIndex) slot(k string) int {
	mask := len(x.slots) - 1
	for i := int(maphash.String(x.seed, k)) & mask; ; i = (i + 1) & mask {
		if p := x.slots[i]; p == 0 || x.keys[p-1] == k {
			return i
		}
	}
}
