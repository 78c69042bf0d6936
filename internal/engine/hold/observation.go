package hold

import (
	"time"
	"unique"

	"github.com/tenure-dev/tenure/store"
)

// observation is a peer's lease as last read, with when its time left
// runs out on the local clock, so that it can be aged. The view holds one for every key of the
// namespace — every key of a pool, not only this replica's share — so it
// is kept small, 32 bytes: the key is the map's, or the numbering's; the owner is interned,
// as a unique.Handle of one pointer (a store answers every read with
// strings of its own, one per lease, where a pool has a few owners); and
// the time left as read is kept as when it runs out, an offset from the
// keeper's clock base, not as a time.Time, nor as the time left and the
// time of the read apart: aging needs only their sum.
type observation struct {
	owner                   unique.Handle[string]
	epoch                   int64
	ends                    time.Duration // when its time left as read runs out, since Keeper.base
	gen                     uint32        // Keeper.gen when it was written: which whole read it survives
	live, released, running bool
	has                     bool // in a numbered view's array: whether there is one (numbered.go)
}

// observe makes l, read at local time at, an observation of the current
// generation. k.mu is held.
func (k *Keeper) observe(l store.Lease, at time.Time) observation {
	return observation{
		owner: k.intern(l.Owner), epoch: l.Epoch, ends: at.Sub(k.base) + l.TimeLeft,
		gen: k.gen, live: l.Live, released: l.Released, running: l.Running, has: true,
	}
}

// leaseAt is the observation of key at now: its time left aged, and
// not live once that has run out. Every term ages, also one already
// over: an expired term's time left goes on falling, which is what says
// when its grace ends, also for a view that follows events and reads it
// no more.
func (k *Keeper) leaseAt(key string, o observation, now time.Time) store.Lease {
	l := store.Lease{
		Key: key, Owner: o.owner.Value(), Epoch: o.epoch, Live: o.live, Released: o.released,
		Running: o.running, TimeLeft: o.ends - now.Sub(k.base),
	}
	if l.TimeLeft <= 0 {
		l.Live = false
	}
	return l
}

// intern returns the handle of owner. unique.Make costs a few map lookups
// and a whole read makes one per lease under k.mu, so the handles of the
// owners seen are kept in a table, made anew by every whole read so that
// owners gone from the store do not pile up there. k.mu is held.
func (k *Keeper) intern(owner string) unique.Handle[string] {
	h, ok := k.owners[owner]
	if !ok {
		h = unique.Make(owner)
		k.owners[owner] = h
	}
	return h
}
