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
	// gaps counts the subscriptions made and broken and the Missed
	// events: a whole read that began before the last gap does not make
	// the view current. outside counts the events pushed about keys
	// outside the pools.
	gaps, outside int
	// keysPrefix and membersPrefix are where the pools' keys and
	// memberships live in this namespace (set once by New).
	keysPrefix, membersPrefix string
}

func newTableReads(prefix string) tableReads {
	return tableReads{keysPrefix: prefix + poolkey.KeysSegment, membersPrefix: prefix + poolkey.WorkersSegment}
}

// readTable refreshes the keeper's view of the lease table for a round or
// a pool plan: the memberships alone when the pools can be followed, else
// the whole table. A whole read during which events were missed again is
// made again at once (a few times at most): the events it missed would
// otherwise wait for the next round.
func (s *Supervisor) readTable(ctx context.Context) error {
	for try := 1; ; try++ {
		current, err := s.readTableOnce(ctx)
		if err != nil || current || try == 3 {
			return err
		}
	}
}

// readTableOnce reads the table once and reports whether the view is as
// current as a read can make it: false after a whole read during which a
// gap in the push channel opened.
func (s *Supervisor) readTableOnce(ctx context.Context) (current bool, err error) {
	start := time.Now()
	follow, followable, t := s.followsPools(start)
	if follow {
		lapsed, err := s.keeper.ObserveVouching(ctx, s.table.membersPrefix, s.isPoolKey)
		if err != nil || !lapsed {
			return true, err
		}
		// A member left or died. Its keys' releases may have been
		// dropped, or its last terms may have ended apart from its
		// membership: read it all rather than wait for them to expire.
	}
	if err := s.keeper.ObserveAll(ctx, s.cfg.Prefix); err != nil {
		return false, err
	}
	if !followable {
		return true, nil // no pools, or no push channel: spare the scan
	}
	// Records of keys nobody holds (released, long expired) need no
	// freshness: a new term of one is pushed, and onEvent notices it. A
	// pool's current keys are numbered, and in the pools anyway.
	others := s.keeper.ObservedUnnumberedWhere(func(l store.Lease) bool {
		return !s.inPools(l.Key) && l.HeldOrInGrace(s.cfg.Grace)
	})
	s.mu.Lock()
	defer s.unlock()
	if s.table.gaps != t.gaps {
		return false, nil
	}
	// A holder outside the pools pushed meanwhile counts as one found.
	s.table.poolsOnly = len(others) == 0 && s.table.outside == t.outside
	s.table.fullAt = start
	return true, nil
}

// followsPools reports whether this round may read the memberships
// alone, and whether it could at all: the supervisor runs pools and a
// subscription to the push channel is live. t is the state it judged,
// for the read to tell what changed meanwhile.
func (s *Supervisor) followsPools(now time.Time) (follow, followable bool, t tableReads) {
	s.mu.Lock()
	defer s.unlock()
	t = s.table
	followable = len(s.pools.byName) > 0 && t.watching && s.cfg.FullReadEvery > s.cfg.RenewEvery
	if !followable || !t.poolsOnly || t.fullAt.IsZero() || now.Sub(t.fullAt) >= s.cfg.FullReadEvery {
		return false, followable, t
	}
	for _, ks := range s.keys {
		if ks.pool == nil && ks.member == nil {
			return false, true, t // a singleton: its controls and peers need the whole table
		}
	}
	return true, true, t
}

// isPoolKey reports whether leaseKey is a pool's key in this namespace.
func (s *Supervisor) isPoolKey(leaseKey string) bool {
	return strings.HasPrefix(leaseKey, s.table.keysPrefix)
}

// inPools reports whether leaseKey is a pool's key or membership in this
// namespace.
func (s *Supervisor) inPools(leaseKey string) bool {
	return s.isPoolKey(leaseKey) || strings.HasPrefix(leaseKey, s.table.membersPrefix)
}

// onEvent records a pushed event in the view. An event about a key
// outside the pools means the namespace is shared: the next round reads
// the whole table, which finds out for how long.
func (s *Supervisor) onEvent(ev store.Event) {
	s.keeper.Apply(ev)
	if !s.inPools(ev.Key) {
		s.mu.Lock()
		s.table.poolsOnly = false
		s.table.outside++
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
	s.table.gaps++
	s.unlock()
}
