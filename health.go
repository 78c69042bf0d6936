package tenure

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// ErrStoreUnreachable: the store has not answered recently (Ready).
var ErrStoreUnreachable = errors.New("tenure: store not reached")

// ErrPoolKeysUnread: a pool's key source has not been read once, so this
// replica takes no part in the pool (Ready).
var ErrPoolKeysUnread = errors.New("tenure: a pool's keys have not been read")

// Live reports whether the supervisor is alive: Run is active and its
// loop began a round within the last 3×RenewEvery. It says nothing about
// the store, so a liveness probe that restarts the process on failure
// (Kubernetes livenessProbe) never restarts every replica because their
// shared store is down — which would not bring the store back.
func (s *Supervisor) Live() error {
	s.mu.Lock()
	defer s.unlock()
	if !s.active || s.stopping {
		return ErrNotRunning
	}
	if since := time.Since(s.lastRound); !s.lastRound.IsZero() && since > 3*s.cfg.RenewEvery {
		return fmt.Errorf("tenure: the supervision loop has not turned for %v (a round is due every %v)", since.Round(time.Millisecond), s.cfg.RenewEvery)
	}
	return nil
}

// Ready reports whether the supervisor can do its job now: it is Live and,
// with leases, the store answered — an acquisition, a read of the lease
// table or a confirmed renewal — within the last 2×RenewEvery (one missed round is
// tolerated), and every pool's keys have been read once. The error wraps
// ErrStoreUnreachable with the store's last error, or ErrPoolKeysUnread
// with the source's. A readiness probe takes an unready replica out of
// rotation without restarting it, and a rollout waits for it: one whose
// key source fails everywhere (a command missing from the new image)
// stops at its first replica instead of replacing every working one by
// one that joins no pool.
func (s *Supervisor) Ready() error {
	if err := s.Live(); err != nil {
		return err
	}
	if !s.leased {
		return nil
	}
	if err := s.storeReady(); err != nil {
		return err
	}
	return s.poolsReady()
}

// storeReady is Ready's check of the store.
func (s *Supervisor) storeReady() error {
	s.mu.Lock()
	defer s.unlock()
	why := ""
	if s.storeErr != nil {
		why = ": " + s.storeErr.Error()
	}
	if s.storeSeen.IsZero() {
		return fmt.Errorf("%w yet%s", ErrStoreUnreachable, why)
	}
	if since := time.Since(s.storeSeen); since > 2*s.cfg.RenewEvery {
		return fmt.Errorf("%w for %v%s", ErrStoreUnreachable, since.Round(time.Millisecond), why)
	}
	return nil
}

// poolsReady is Ready's check of the pools: the first, by name, whose keys
// were never read. The source's error is formatted once the lock is
// released: its Error method is user code.
func (s *Supervisor) poolsReady() error {
	s.mu.Lock()
	unread, why := "", error(nil)
	for _, name := range slices.Sorted(maps.Keys(s.pools.byName)) {
		if ps := s.pools.byName[name]; !ps.coord.Loaded() {
			unread = name
			_, why = ps.coord.Source()
			break
		}
	}
	s.unlock()
	switch {
	case unread == "":
		return nil
	case why != nil:
		return fmt.Errorf("%w: pool %s, so this replica takes no part in it: %w", ErrPoolKeysUnread, unread, why)
	default:
		return fmt.Errorf("%w yet: pool %s, so this replica takes no part in it", ErrPoolKeysUnread, unread)
	}
}

// storeAnswered records that the store answered a call (err nil), or why
// it did not, noting a refusal for good for the round's count. Another
// error (a timeout, a lost connection) says nothing about the rights.
func (s *Supervisor) storeAnswered(err error) {
	s.mu.Lock()
	defer s.unlock()
	switch {
	case err == nil:
		s.storeSeen, s.storeErr, s.sawAnswer = time.Now(), nil, true
	case store.Permanent(err):
		s.storeErr = err
		s.sawRefusal = true
	default:
		s.storeErr = err
	}
}

// countRefusedRound ends a round's count: a round in which the store
// refused calls for good and answered none adds one, any answer starts
// over. Rounds, not calls: a replica with many keys makes a call per key
// in one pass, and a refusal of a moment (a REVOKE and GRANT as two
// statements, pods that start just before the grant job) must not end
// every replica at once.
func (s *Supervisor) countRefusedRound() {
	s.mu.Lock()
	defer s.unlock()
	switch {
	case s.sawAnswer:
		s.refusedRounds = 0
	case s.sawRefusal:
		s.refusedRounds++
	}
	s.sawAnswer, s.sawRefusal = false, false
}

// givenUp returns why Run gives up, or nil: Config.MaxRefused rounds in a
// row refused for good.
func (s *Supervisor) givenUp() error {
	s.mu.Lock()
	defer s.unlock()
	if s.cfg.MaxRefused < 0 || s.refusedRounds < s.cfg.MaxRefused {
		return nil
	}
	return fmt.Errorf("%w: %d rounds in a row, the last error: %w", ErrStoreRefused, s.refusedRounds, s.storeErr)
}
