package hold

import (
	"context"
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
	cur, seen := k.observed[ev.Key]
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
		k.observed[ev.Key] = k.observe(l, k.now())
	case store.Released:
		if seen && cur.released && cur.epoch == ev.Epoch {
			return
		}
		k.observed[ev.Key] = k.observe(store.Lease{Key: ev.Key, Owner: ev.Owner, Epoch: ev.Epoch, Released: true}, k.now())
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
// term whose key follows accepts, still live in the view, and whose owner
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
		if before, ok := k.observed[l.Key]; ok && before.live && !l.Live {
			lapsed = true // as listed last time, not aged: a crash counts too
		}
		if _, mine := k.held[l.Key]; !mine {
			k.observed[l.Key] = k.observe(l, at)
		}
		if v, ok := vouch[l.Owner]; l.Owner != "" && !l.Released && (!ok || l.TimeLeft > v.TimeLeft) {
			vouch[l.Owner] = l
		}
	}
	for key, o := range k.observed {
		switch {
		case strings.HasPrefix(key, prefix):
			if !listed[key] {
				lapsed = lapsed || o.live
				delete(k.observed, key)
			}
		case o.released || o.owner.Value() == k.owner || !follows(key):
		case !o.live || o.ends <= at.Sub(k.base):
			// Ended as last seen: a vouch must not bring it back.
		default:
			if v, ok := vouch[o.owner.Value()]; ok {
				o.live, o.ends = v.Live, at.Sub(k.base)+v.TimeLeft
				k.observed[key] = o
			}
		}
	}
	return lapsed, nil
}
