package tenure

import (
	"context"
	"strings"

	"github.com/tenure-dev/tenure/store"
)

// recordInfixes mark the records Tenure keeps next to a key; no key may
// hold one.
var recordInfixes = []string{PauseSuffix, MoveInfix, DoneInfix, StartedInfix}

// holdsRecordInfix reports whether key holds one of recordInfixes.
func holdsRecordInfix(key string) bool {
	for _, infix := range recordInfixes {
		if strings.Contains(key, infix) {
			return true
		}
	}
	return false
}

// controls are what an operator's records in the lease table say of one
// singleton key on this replica (Pause, Move).
type controls struct {
	paused bool // a live pause record
	moved  bool // a live move record bars this replica
}

// controlsOf reads key's control records from leases, as replica self.
func controlsOf(key, self string, leases []store.Lease) controls {
	var c controls
	for _, l := range leases {
		if k, ok := PausedKey(l.Key); ok && k == key && l.Live && l.Owner == PauseOwner {
			c.paused = true
		}
		if m, ok := ParseMove(l); ok && m.Key == key && m.bars(self) {
			c.moved = true
		}
	}
	return c
}

// readControls reads key's control records from the store: a replica
// about to start a new term does, as its last read of the table may
// predate a pause or a move.
func (s *Supervisor) readControls(ctx context.Context, key string) (controls, error) {
	leases, err := s.cfg.Store.List(ctx, key+"~")
	if err != nil {
		return controls{}, err
	}
	return controlsOf(key, s.owner, leases), nil
}

// applyControls sets every singleton key's controls from the last read of
// the lease table; reconcile does the rest.
func (s *Supervisor) applyControls() {
	// Controls are singletons' records, never a pool's numbered keys.
	records := s.keeper.ObservedUnnumberedWhere(func(l store.Lease) bool {
		return strings.Contains(l.Key, PauseSuffix) || strings.Contains(l.Key, MoveInfix)
	})
	s.mu.Lock()
	defer s.unlock()
	for key, ks := range s.keys {
		if ks.pool == nil && ks.member == nil {
			ks.ctl = controlsOf(key, s.owner, records)
		}
	}
}
