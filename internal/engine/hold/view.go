package hold

import (
	"context"
	"slices"
	"strings"

	"github.com/tenure-dev/tenure/store"
)

// A keeper's view of the peers' leases is refreshed in one of two ways.
// ObserveAll reads the whole table: its cost grows with every key of the
// namespace, on every replica, every round. A replica that follows the
// store's push channel can instead keep the view current from the events
// (Apply) and read only the few leases that vouch for the rest
// (ObserveVouching), with a whole read now and then to correct what an
// event that never arrived left wrong. The view only steers which keys to
// try: the store arbitrates every acquisition, so a stale view costs a
// refused call or a later claim, never a key held twice.

// Apply records a pushed event in the view. An acquisition by another
// owner is a live term of one TTL from now, as the event carries no
// expiry (ObserveVouching and whole reads correct it); a release is a
// released term. An event about a term older than the one in view, or
// about a key this replica holds, changes nothing.
func (k *Keeper) Apply(ev store.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.reads > 0 {
		// A read in flight may answer with a table older than this event:
		// it applies the event again once it has replaced the view.
		k.recent = append(k.recent, ev)
	}
	k.applyLocked(ev)
}

func (k *Keeper) applyLocked(ev store.Event) {
	if _, mine := k.held[ev.Key]; mine {
		return
	}
	cur, seen := k.lookup(ev.Key)
	if seen && cur.epoch > ev.Epoch {
		return
	}
	switch ev.Kind {
	case store.Acquired:
		if ev.Owner == k.owner || seen && cur.epoch == ev.Epoch {
			return // our own term, or one the view already has
		}
		l := store.Lease{Key: ev.Key, Owner: ev.Owner, Epoch: ev.Epoch, Live: true, TimeLeft: k.timing.TTL}
		if ev.Owner == "" {
			// A revocation (some stores push one): owned by nobody, and
			// blocked until the revoked term's expiry, as last seen.
			l.Live, l.TimeLeft = false, 0
			if before, ok := k.observedLocked(ev.Key); ok {
				l.TimeLeft = before.TimeLeft
			}
		}
		k.record(ev.Key, k.observe(l, k.now()))
	case store.Released:
		if seen && cur.released && cur.epoch == ev.Epoch {
			return
		}
		k.record(ev.Key, k.observe(store.Lease{Key: ev.Key, Owner: ev.Owner, Epoch: ev.Epoch, Released: true}, k.now()))
	}
}

// beginRead notes a read of the table in flight and returns where the
// events it may miss begin.
func (k *Keeper) beginRead() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	return len(k.recent)
}

// endReadLocked applies again the events that arrived since the read
// began (from), then forgets them once no read is in flight. k.mu is held.
func (k *Keeper) endReadLocked(from int) {
	for _, ev := range k.recent[from:] {
		k.applyLocked(ev)
	}
	if k.reads--; k.reads == 0 {
		clear(k.recent)
		k.recent = k.recent[:0]
	}
}

// ObserveVouching reads the leases under prefix, which replace the view's
// leases under prefix, and lets them vouch for the view's other terms: a
// term whose key follows accepts (a numbered key always does: it is a
// pool's), still live in the view, and whose owner
// holds a lease under prefix takes that lease's liveness and time left
// (the longest, if the owner holds several). Each owner renews all its
// terms in one call, so its membership in a pool says how long its pool
// keys last; a term it lost on its own (revoked, say) stays wrong until
// the next whole read. A vouch extends a term, never revives one a read
// saw end, and never vouches for this replica's own: those it knows.
//
// lapsed reports a lease under prefix that was live in the view and is
// not any more (a member that left or died): its terms may have ended in
// ways no vouch can tell, so the caller reads the whole table.
func (k *Keeper) ObserveVouching(ctx context.Context, prefix string, follows func(key string) bool) (lapsed bool, err error) {
	from := k.beginRead()
	at := k.now()
	leases, err := bounded(ctx, k.timing.CallTimeout, func(ctx context.Context) ([]store.Lease, error) {
		return k.st.List(ctx, prefix)
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	defer k.endReadLocked(from)
	if err != nil {
		return false, err
	}
	listed := make(map[string]bool, len(leases))
	vouch := make(map[string]store.Lease, len(leases))
	for _, l := range leases {
		listed[l.Key] = true
		if before, ok := k.lookup(l.Key); ok && before.live && !l.Live {
			lapsed = true // as listed last time, not aged: a crash counts too
		}
		if !k.holds(l.Key) {
			k.record(l.Key, k.observe(l, at))
		}
		if v, ok := vouch[l.Owner]; l.Owner != "" && !l.Released && (!ok || l.TimeLeft > v.TimeLeft) {
			vouch[l.Owner] = l
		}
	}
	// extend makes o as the listed leases vouch for it.
	extend := func(o *observation, follows bool) {
		switch {
		case o.released || o.owner.Value() == k.owner || !follows:
		case !o.live || o.ends <= at.Sub(k.base):
			// Ended as last seen: a vouch must not bring it back.
		default:
			if v, ok := vouch[o.owner.Value()]; ok {
				o.live, o.ends = v.Live, at.Sub(k.base)+v.TimeLeft
			}
		}
	}
	for key, o := range k.observed.M {
		switch {
		case !strings.HasPrefix(key, prefix):
			extend(&o, follows(key))
			k.observed.M[key] = o
		case !listed[key]:
			lapsed = lapsed || o.live
			k.observed.Delete(key)
		}
	}
	k.observed.Compact()
	// A numbering's keys are a pool's: they all follow.
	for _, n := range k.numbered {
		for i := range n.obs {
			switch o := &n.obs[i]; {
			case !o.has:
			case !n.under(i, prefix):
				extend(o, true)
			case !listed[n.leaseKey(i)]:
				lapsed = lapsed || o.live
				*o = observation{}
			}
		}
	}
	return lapsed, nil
}

// heldAt reports whether this replica holds the key at position i of n,
// without making its lease key: the lookup of a map by a conversion of
// bytes makes no string. k.mu is held.
func (k *Keeper) heldAt(n *numbered, i int) bool {
	k.keyBuf = append(append(k.keyBuf[:0], n.keys.Prefix()...), n.keys.Key(i)...)
	_, mine := k.held[string(k.keyBuf)]
	return mine
}

// eachLocked calls f with every observation in the view and where it is
// kept: by lease key (n is nil), or at position i of n, whose lease key
// only keyOf makes. k.mu is held.
func (k *Keeper) eachLocked(f func(n *numbered, i int, key string, o observation)) {
	for key, o := range k.observed.M {
		f(nil, 0, key, o)
	}
	for _, n := range k.numbered {
		for i, o := range n.obs {
			if o.has {
				f(n, i, "", o)
			}
		}
	}
}

// keyOf is the lease key of what eachLocked passed.
func keyOf(n *numbered, i int, key string) string {
	if n == nil {
		return key
	}
	return n.leaseKey(i)
}

// PeerKeys returns every key a live peer leads, as last seen, sorted.
func (k *Keeper) PeerKeys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var keys []string
	now := k.now()
	k.eachLocked(func(n *numbered, i int, key string, o observation) {
		if l := k.leaseAt("", o, now); l.Live && l.Owner != "" && l.Owner != k.owner {
			if key := keyOf(n, i, key); !k.holds(key) {
				keys = append(keys, key)
			}
		}
	})
	slices.Sort(keys)
	return keys
}

// ObservedKeys returns every key seen in the store, sorted.
func (k *Keeper) ObservedKeys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var keys []string
	k.eachLocked(func(n *numbered, i int, key string, _ observation) { keys = append(keys, keyOf(n, i, key)) })
	slices.Sort(keys)
	return keys
}

// Released returns, as Observed would, the last observed lease of every
// key that a peer released, in no particular order. Each round asks, so
// it makes the lease key of none of the rest.
func (k *Keeper) Released() []store.Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []store.Lease
	now := k.now()
	k.eachLocked(func(n *numbered, i int, key string, o observation) {
		if o.released {
			if key := keyOf(n, i, key); !k.holds(key) {
				out = append(out, k.leaseAt(key, o, now))
			}
		}
	})
	return out
}

// ObservedUnnumberedWhere returns, as Observed would, the last observed
// lease of every key that match accepts, in no particular order, among
// the keys no numbering numbers: singletons, memberships, and keys that
// left a pool's source. A pool's current keys are numbered, and
// LiveOwners and Released report them. One pass under one lock and one
// reading of the clock, for a round that looks for a few records among
// thousands.
func (k *Keeper) ObservedUnnumberedWhere(match func(l store.Lease) bool) []store.Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []store.Lease
	now := k.now()
	for key, o := range k.observed.M {
		if l := k.leaseAt(key, o, now); match(l) && !k.holds(key) {
			out = append(out, l)
		}
	}
	return out
}

// holds reports whether key is one of this replica's terms. k.mu is held.
func (k *Keeper) holds(key string) bool {
	_, mine := k.held[key]
	return mine
}

// Seen is a lease as LiveOwners reports it: of Key, or for a numbered
// key, of the key at position At of Keys (Number).
type Seen struct {
	Key           string
	Keys          Numbering
	At            int
	Owner         string
	Live, Running bool
}

// LiveOwners calls f for every key whose lease is live as last seen —
// this replica's own terms included — with its owner and whether the
// owner reported its runner running. With inGrace, terms that expired
// less than Grace ago count too: no peer can take them yet.
//
// f runs under the keeper's lock: it must not call the keeper. It
// returns false to stop.
func (k *Keeper) LiveOwners(inGrace bool, f func(Seen) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range k.held {
		if !f(Seen{Key: key, Owner: k.owner, Live: true, Running: true}) {
			return
		}
	}
	now := k.now()
	counts := func(l store.Lease) bool { return l.HeldOrInGrace(k.timing.Grace) && (l.Live || inGrace) }
	for key, o := range k.observed.M {
		if l := k.leaseAt(key, o, now); counts(l) && !k.holds(key) {
			if !f(Seen{Key: key, Owner: l.Owner, Live: l.Live, Running: l.Running}) {
				return
			}
		}
	}
	for _, n := range k.numbered {
		for i, o := range n.obs {
			if !o.has {
				continue
			}
			if l := k.leaseAt("", o, now); counts(l) && !k.heldAt(n, i) {
				if !f(Seen{Keys: n.keys, At: i, Owner: l.Owner, Live: l.Live, Running: l.Running}) {
					return
				}
			}
		}
	}
}
