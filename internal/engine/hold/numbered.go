package hold

import (
	"slices"
	"strings"
)

// Numbering gives the keys under one prefix the positions 0 to Len()-1:
// a pool's keys, as its coordinator indexes them. The view holds an
// observation of every key of every pool, not only this replica's share,
// and as a map by lease key it was the largest part of a worker: at
// 100,000 keys, 7 MB of map and 2 MB of the keys' strings, which every
// whole read made anew. Kept by position instead (Number), it is an array
// of 32-byte observations, and the keys' strings are the numbering's.
//
// A Numbering must not change once given to the keeper: a new set of
// keys is a new Numbering.
type Numbering interface {
	Prefix() string              // every numbered lease key starts with it
	Len() int                    // how many keys it numbers
	Key(i int) string            // the key at position i, without the prefix
	Find(key string) (int, bool) // the position of key, without the prefix
}

// numbered is the view of the keys a numbering numbers.
type numbered struct {
	keys Numbering
	obs  []observation // by position; has is false where none is
}

func (n *numbered) leaseKey(i int) string { return n.keys.Prefix() + n.keys.Key(i) }

// under reports whether the lease key of the key at i starts with prefix,
// without making it.
func (n *numbered) under(i int, prefix string) bool {
	own := n.keys.Prefix()
	if len(prefix) <= len(own) {
		return strings.HasPrefix(own, prefix)
	}
	rest, ok := strings.CutPrefix(prefix, own)
	return ok && strings.HasPrefix(n.keys.Key(i), rest)
}

// Number keeps the view of the keys that keys numbers as an array by
// position from now on, and moves there what the view has of them. It
// replaces the numbering of the same prefix, if any: what the view has of
// a key the new one leaves out is kept by lease key again. A source read
// again lists the same keys most times: a numbering of them in the same
// order keeps the array, so each read costs a comparison, not a copy.
func (k *Keeper) Number(keys Numbering) {
	k.mu.Lock()
	defer k.mu.Unlock()
	prefix := keys.Prefix()
	i := slices.IndexFunc(k.numbered, func(o *numbered) bool { return o.keys.Prefix() == prefix })
	if i >= 0 && sameKeys(k.numbered[i].keys, keys) {
		k.numbered[i].keys = keys
		return
	}
	n := &numbered{keys: keys, obs: make([]observation, keys.Len())}
	if i < 0 {
		k.numbered = append(k.numbered, n)
	} else {
		old := k.numbered[i]
		k.numbered[i] = n
		for j, o := range old.obs {
			if !o.has {
				continue
			}
			if p, ok := keys.Find(old.keys.Key(j)); ok {
				n.obs[p] = o
			} else {
				k.observed.M[old.leaseKey(j)] = o
			}
		}
	}
	for key, o := range k.observed.M {
		if rest, ok := strings.CutPrefix(key, prefix); ok {
			if p, ok := keys.Find(rest); ok {
				n.obs[p] = o
				k.observed.Delete(key)
			}
		}
	}
	// A whole read before the first numbering grew the map to every key.
	k.observed.Compact()
}

// sameKeys reports whether a and b number the same keys the same way.
func sameKeys(a, b Numbering) bool {
	if a.Len() != b.Len() {
		return false
	}
	for i := range a.Len() {
		if a.Key(i) != b.Key(i) {
			return false
		}
	}
	return true
}

// numberedAt is where key's observation is kept if a numbering numbers
// it. k.mu is held.
func (k *Keeper) numberedAt(key string) (*observation, bool) {
	for _, n := range k.numbered {
		if rest, ok := strings.CutPrefix(key, n.keys.Prefix()); ok {
			if p, ok := n.keys.Find(rest); ok {
				return &n.obs[p], true
			}
		}
	}
	return nil, false
}

// lookup returns the view's observation of key. k.mu is held.
func (k *Keeper) lookup(key string) (observation, bool) {
	if o, ok := k.numberedAt(key); ok {
		return *o, o.has
	}
	o, ok := k.observed.M[key]
	return o, ok
}

// record makes o the view's observation of key. k.mu is held.
func (k *Keeper) record(key string, o observation) {
	if at, ok := k.numberedAt(key); ok {
		*at = o
		return
	}
	k.observed.M[key] = o
}

// forget drops the view's observation of key. k.mu is held.
func (k *Keeper) forget(key string) {
	if at, ok := k.numberedAt(key); ok {
		*at = observation{}
		return
	}
	k.observed.Delete(key)
	k.observed.Compact()
}
