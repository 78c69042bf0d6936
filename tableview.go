package tenure

import (
	"context"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// tableReads is how the supervisor refreshes its view of the lease table,
// guarded by Supervisor.mu. A replica that runs pools alone in its
// namespace, on a store with a push channel, follows the pools: it keeps
// the view of their keys from the pushed events and reads only the
// memberships each round, which vouch for their holders' keys
// (hold.Keeper.ObserveVouching). Its reads per round then grow with the
// workers and the keys that change, not with the keys, and a whole read
// every Config.FullReadEvery corrects what an event that never arrived
// left wrong. Any other replica reads the whole table every round.
type tableReads struct {
	// watching: a subscription to the push channel is live, so the view
	// hears of every change (events may still be dropped).
	watching bool
	// poolsOnly: the last whole read found no term held in the namespace
	// but of pools' keys and memberships, and no event since told of one.
	poolsOnly bool
	// fullAt is when the last whole read began; zero forces one.
	fullAt time.Time
}

// readTable refreshes the keeper's view of the lease table for a round or
// a pool plan: the memberships alone when the pools can be followed, else
// the whole table.
func (s *Supervisor) readTable(ctx context.Context) error {
	start := time.Now()
	if s.followsPools(start) {
		return s.keeper.ObserveVouching(ctx, s.cfg.Prefix+poolkey.WorkersSegment, s.isPoolKey)
	}
	if err := s.keeper.ObserveAll(ctx, s.cfg.Prefix); err != nil {
		return err
	}
	// Records of keys nobody holds (released, long expired) need no
	// freshness: a new term of one is pushed, and onEvent notices it.
	others := s.keeper.ObservedWhere(func(l store.Lease) bool {
		return !s.inPools(l.Key) && l.HeldOrInGrace(s.cfg.Grace)
	})
	s.mu.Lock()
	s.table.poolsOnly, s.table.fullAt = len(others) == 0, start
	s.unlock()
	return nil
}

// followsPools reports whether this round may read the memberships alone.
func (s *Supervisor) followsPools(now time.Time) bool {
	s.mu.Lock()
	defer s.unlock()
	t := s.table
	if !t.watching || !t.poolsOnly || t.fullAt.IsZero() || now.Sub(t.fullAt) >= s.cfg.FullReadEvery || len(s.pools.byName) == 0 {
		return false
	}
	for _, ks := range s.keys {
		if ks.pool == nil && !ks.member {
			return false // a singleton: its controls and peers need the whole table
		}
	}
	return true
}

// isPoolKey reports whether leaseKey is a pool's key in this namespace.
func (s *Supervisor) isPoolKey(leaseKey string) bool {
	return strings.HasPrefix(leaseKey, s.cfg.Prefix+poolkey.KeysSegment)
}

// inPools reports whether leaseKey is a pool's key or membership in this
// namespace.
func (s *Supervisor) inPools(leaseKey string) bool {
	return s.isPoolKey(leaseKey) || strings.HasPrefix(leaseKey, s.cfg.Prefix+poolkey.WorkersSegment)
}

// onEvent records a pushed event in the view. An event about a key
// outside the pools means the namespace is shared: the next round reads
// the whole table, which finds out for how long.
func (s *Supervisor) onEvent(ev store.Event) {
	s.keeper.Apply(ev)
	if !s.inPools(ev.Key) {
		s.mu.Lock()
		s.table.poolsOnly = false
		s.unlock()
	}
}

// following marks a subscription to the push channel live or broken.
// Events may have been missed while none was live, so a new one is
// followed only after a whole read.
func (s *Supervisor) following(live bool) {
	s.mu.Lock()
	s.table.watching = live
	s.table.fullAt = time.Time{}
	s.unlock()
}
