package tenure

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// A move has a record of its own in the lease table: key + MoveInfix +
// FROM, the owner id of the holder it moves the key away from, held for
// the move's duration by MoveOwner, or by MoveOwner + ":" + TO when it
// names the replica to move to. While it is live FROM stops its runner,
// releases, and does not ask for the key; with TO, only a replica named
// TO (Config.Owner) or with owner id TO may take it.
const (
	MoveInfix = "~move/"
	MoveOwner = "tenure-move"
	// DefaultMoveFor is how long a move keeps its holder out and reserves
	// the key for its target: long enough for the target's next round.
	DefaultMoveFor = time.Minute
)

// Move hands key over from its current holder: within one round the holder
// stops its runner gracefully and releases, and stays out for d (default
// DefaultMoveFor). With to set (an owner name or id), only that replica
// may take the key meanwhile; if it does not, the key waits for d. It
// returns the owner id it moved the key from. Singleton keys only.
func Move(ctx context.Context, st store.Store, key, to string, d time.Duration) (string, error) {
	if err := checkPausable(key); err != nil {
		return "", err
	}
	if d <= 0 {
		d = DefaultMoveFor
	}
	leases, err := st.List(ctx, key)
	if err != nil {
		return "", fmt.Errorf("move %s: %w", key, err)
	}
	var from string
	for _, l := range leases {
		if l.Key == key && l.Live {
			from = l.Owner
		}
	}
	switch {
	case from == "":
		return "", fmt.Errorf("move %s: no live holder to move it from", key)
	case to != "" && (to == from || to == OwnerName(from)):
		return "", fmt.Errorf("move %s: %s holds it already", key, to)
	}
	owner := MoveOwner
	if to != "" {
		owner += ":" + to
	}
	res, err := st.Acquire(ctx, store.AcquireRequest{Key: key + MoveInfix + from, Owner: owner, TTL: d})
	switch {
	case err != nil:
		return "", fmt.Errorf("move %s: %w", key, err)
	case !res.Acquired:
		return "", fmt.Errorf("move %s: a move of it from %s is under way already", key, from)
	}
	return from, nil
}

// Move hands key over from its holder (see the package function).
func (s *Supervisor) Move(ctx context.Context, key, to string, d time.Duration) (string, error) {
	if !s.leased {
		return "", fmt.Errorf("move %s: moving needs leases: %w", key, ErrConfig)
	}
	return Move(ctx, s.cfg.Store, key, to, d)
}

// MoveRecord is a live move read from the lease table.
type MoveRecord struct {
	Key, From, To string // To is "" for any replica but From
}

// ParseMove reports whether l is a live move record, and which.
func ParseMove(l store.Lease) (MoveRecord, bool) {
	key, from, ok := strings.Cut(l.Key, MoveInfix)
	if !ok || from == "" || !l.Live {
		return MoveRecord{}, false
	}
	var to string
	if l.Owner != MoveOwner {
		var named bool
		if to, named = strings.CutPrefix(l.Owner, MoveOwner+":"); !named || to == "" {
			return MoveRecord{}, false
		}
	}
	return MoveRecord{Key: key, From: from, To: to}, true
}

// bars reports whether m keeps replica self (an owner id) from running
// its key: self is the holder it moves away from, or it names another.
func (m MoveRecord) bars(self string) bool {
	return m.From == self || m.To != "" && m.To != self && m.To != OwnerName(self)
}
