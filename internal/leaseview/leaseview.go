// Package leaseview reads a listing of the lease table the way an operator
// wants to see it: the keys, the pause and move records that steer them,
// and the pool members apart. tenure status and the web console both show
// a store through it, so the two never disagree on what a record means.
package leaseview

import (
	"strings"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// View is a listing sorted into what it holds.
type View struct {
	// Keys are the leases of singleton and pool keys, in listing order.
	Keys []store.Lease
	// Paused are the keys a live pause record stops.
	Paused []string
	// Moves are the moves under way, each with its record's lease.
	Moves []Move
	// Workers are the pool memberships, live or not.
	Workers []Worker
	// Done counts the scheduled periods recorded as finished.
	Done int
}

// Move is a move under way.
type Move struct {
	tenure.MoveRecord
	Lease store.Lease
}

// Worker is a pool member's lease.
type Worker struct {
	poolkey.Member
	Lease store.Lease
	// Held counts the member's live leases of its pool in the listing.
	Held int
}

// State is the worker's state: active, draining (stopping, handing its
// keys back), or, once gone, the State of its lease.
func (w Worker) State() string {
	switch {
	case w.Lease.Live && w.Lease.Running:
		return "active"
	case w.Lease.Live:
		return "draining"
	}
	return State(w.Lease)
}

// Classify sorts a listing. A membership with a malformed weight is a
// plain key, as every worker ignores it.
func Classify(leases []store.Lease) View {
	var v View
	type poolOwner struct{ prefix, pool, owner string }
	held := make(map[poolOwner]int)
	for _, l := range leases {
		if k, ok := tenure.PausedKey(l.Key); ok {
			if l.Live {
				v.Paused = append(v.Paused, k)
			}
			continue
		}
		if strings.Contains(l.Key, tenure.DoneInfix) || strings.Contains(l.Key, tenure.StartedInfix) {
			if l.Live && strings.Contains(l.Key, tenure.DoneInfix) {
				v.Done++
			}
			continue // a schedule's bookkeeping
		}
		if strings.Contains(l.Key, tenure.MoveInfix) {
			if m, ok := tenure.ParseMove(l); ok {
				v.Moves = append(v.Moves, Move{MoveRecord: m, Lease: l})
			}
			continue
		}
		if m, err := poolkey.ParseMember(l.Key); err == nil {
			v.Workers = append(v.Workers, Worker{Member: m, Lease: l})
			continue
		}
		v.Keys = append(v.Keys, l)
		if prefix, pool, _, ok := poolkey.ParseKey(l.Key); ok && l.Live {
			held[poolOwner{prefix, pool, l.Owner}]++
		}
	}
	for i, w := range v.Workers {
		if w.Lease.Live {
			v.Workers[i].Held = held[poolOwner{w.Prefix, w.Pool, w.Lease.Owner}]
		}
	}
	return v
}

// State is the word shown for a lease: held, released, expired, or
// revoked (by tenure release: owned by nobody, blocked until its expiry +
// grace).
func State(l store.Lease) string {
	switch {
	case l.Live:
		return "held"
	case l.Released:
		return "released"
	case l.Owner == "" && l.Epoch > 0:
		return "revoked"
	default:
		return "expired"
	}
}
