package hold

import (
	"time"
	"unique"

	"github.com/tenure-dev/tenure/store"
)

// observation is a peer's lease as last read, with the local time of the
// read so time left can be aged. The view holds one for every key of the
// namespace — every key of a pool, not only this replica's share — so it
// is kept small: the key is the map's; the owner is interned, as a
// unique.Handle of one pointer (a store answers every read with strings
// of its own, one per lease, where a pool has a few owners); and the read
// time is an offset from the keeper's clock base, not a time.Time.
type observation struct {
	owner                   unique.Handle[string]
	epoch                   int64
	timeLeft                time.Duration // as read, not aged
	at                      time.Duration // when read, since Keeper.base
	gen                     uint32        // Keeper.gen when it was written: which whole read it survives
	live, released, running bool
}

// observe makes l, read at local time at, an observation of the current
// generation. k.mu is held.
func (k *Keeper) observe(l store.Lease, at time.Time) observation {
	return observation{
		owner: k.intern(l.Owner), epoch: l.Epoch, timeLeft: l.TimeLeft, at: at.Sub(k.base),
		gen: k.gen, live: l.Live, released: l.Released, running: l.Running,
	}
}

// lease is the observation of key as read, its time left not aged.
func (o observation) lease(key string) store.Lease {
	return store.Lease{
		Key: key, Owner: o.owner.Value(), Epoch: o.epoch, Live: o.live, Released: o.released,
		Running: o.running, TimeLeft: o.timeLeft,
	}
}

// age is how long before now the observation was read.
func (k *Keeper) age(o observation, now time.Time) time.Duration {
	return now.Sub(k.base) - o.at
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
