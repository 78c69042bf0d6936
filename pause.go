package tenure

import (
	"context"
	"fmt"
	"strings"

	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// A paused key has a record of its own in the lease table: key + PauseSuffix,
// held by PauseOwner for pauseTTL. Every replica reads it with the rest of
// the table each round, so a pause needs no new store operation and works
// on every store; while it is live no replica starts the key, and the
// holder stops its runner and releases the lease.
const (
	PauseSuffix = "~paused"
	PauseOwner  = "tenure-pause"
	// pauseTTL is long enough to mean "until resumed"; it still ends, so
	// a forgotten pause cannot outlive the system by decades.
	pauseTTL = store.MaxTTL
)

// Pause pauses key cluster-wide: within one round (RenewEvery) of every
// replica, the holder stops its runner gracefully and releases the lease,
// and no replica starts the key again until Resume. Pausing a paused key
// does nothing. Singleton keys only: a pool's keys follow its source.
func Pause(ctx context.Context, st store.Store, key string) error {
	if err := checkPausable(key); err != nil {
		return err
	}
	res, err := st.Acquire(ctx, store.AcquireRequest{Key: key + PauseSuffix, Owner: PauseOwner, TTL: pauseTTL})
	switch {
	case err != nil:
		return fmt.Errorf("pause %s: %w", key, err)
	case !res.Acquired && !(res.Holder.Live && res.Holder.Owner == PauseOwner):
		return fmt.Errorf("pause %s: its pause record is held by %q, not %q", key, res.Holder.Owner, PauseOwner)
	}
	return nil
}

// Resume lifts a Pause: within one round replicas may take the key again.
// It reports whether the key was paused.
func Resume(ctx context.Context, st store.Store, key string) (bool, error) {
	l, paused, err := pauseRecord(ctx, st, key)
	if err != nil || !paused {
		return false, err
	}
	if err := st.Release(ctx, PauseOwner, []store.Term{{Key: l.Key, Epoch: l.Epoch}}); err != nil {
		return false, fmt.Errorf("resume %s: %w", key, err)
	}
	return true, nil
}

// Paused reports whether key is paused.
func Paused(ctx context.Context, st store.Store, key string) (bool, error) {
	_, paused, err := pauseRecord(ctx, st, key)
	return paused, err
}

func pauseRecord(ctx context.Context, st store.Store, key string) (store.Lease, bool, error) {
	if err := checkPausable(key); err != nil {
		return store.Lease{}, false, err
	}
	leases, err := st.List(ctx, key+PauseSuffix)
	if err != nil {
		return store.Lease{}, false, fmt.Errorf("read the pause of %s: %w", key, err)
	}
	for _, l := range leases {
		if l.Key == key+PauseSuffix && l.Live && l.Owner == PauseOwner {
			return l, true, nil
		}
	}
	return store.Lease{}, false, nil
}

func checkPausable(key string) error {
	if err := store.ValidateKey(key); err != nil {
		return err
	}
	if err := store.ValidateKey(key + PauseSuffix); err != nil {
		return err
	}
	if poolkey.Reserved(key) || holdsRecordInfix(key) {
		return fmt.Errorf("key %q: only singleton keys can be paused: %w", key, ErrConfig)
	}
	return nil
}

// PausedKey reports whether leaseKey is a pause record, and of which key.
func PausedKey(leaseKey string) (string, bool) {
	return strings.CutSuffix(leaseKey, PauseSuffix)
}

// Pause pauses key on the supervisor's store (see the package function).
func (s *Supervisor) Pause(ctx context.Context, key string) error {
	if !s.leased {
		return fmt.Errorf("pause %s: pausing needs leases: %w", key, ErrConfig)
	}
	return Pause(ctx, s.cfg.Store, key)
}

// Resume lifts a pause of key on the supervisor's store.
func (s *Supervisor) Resume(ctx context.Context, key string) (bool, error) {
	if !s.leased {
		return false, fmt.Errorf("resume %s: pausing needs leases: %w", key, ErrConfig)
	}
	return Resume(ctx, s.cfg.Store, key)
}
