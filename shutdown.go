package tenure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
)

// shutdown stops every runner, waits up to StopTimeout, and releases the
// leases whose runners returned, in one call.
func (s *Supervisor) shutdown() error {
	s.mu.Lock()
	s.stopping = true // from now on renewals report pool memberships draining
	s.unlock()
	s.drainPools()
	s.mu.Lock()
	var waits []*runState
	for _, ks := range s.keys {
		if ks.run != nil {
			ks.run.stop(ErrStopping)
			waits = append(waits, ks.run)
		}
	}
	s.unlock()

	deadline := time.NewTimer(s.cfg.StopTimeout)
	defer deadline.Stop()
	var stuck []string
	for _, r := range waits {
		select {
		case <-r.done:
		case <-deadline.C:
			deadline.Reset(0)
			stuck = append(stuck, r.key)
		}
	}
	var errs []error
	if s.leased {
		var release []hold.Term
		for _, t := range s.keeper.Held() {
			if !slices.Contains(stuck, t.Key) {
				release = append(release, t)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		if err := s.keeper.Release(ctx, release...); err != nil {
			s.log.Warn("could not release leases on shutdown; they expire on their own", "err", err)
		} else {
			for _, t := range release {
				s.log.Info("released lease", "key", t.Key, "epoch", t.Epoch)
				s.obs.Handover(HandoverReleased)
			}
		}
		cancel()
		s.obs.LeasesHeld(s.keeper.HeldCount())
	}
	for _, key := range stuck {
		s.log.Error("runner did not stop in time; its lease is left to expire", "key", key, "stop_timeout", s.cfg.StopTimeout)
		errs = append(errs, fmt.Errorf("key %q: %w", key, ErrStopTimeout))
	}
	s.waitActions(stuck)
	return errors.Join(errs...)
}

// waitActions waits for start actions and runner goroutines, except those
// of stuck runners, which may never return.
func (s *Supervisor) waitActions(stuck []string) {
	if len(stuck) == 0 {
		s.actions.Wait()
	}
}

// drainPools marks this replica's pool memberships as draining (runner not
// running) in one renewal before its keys are stopped, so peers planning
// meanwhile stop counting it as a worker.
func (s *Supervisor) drainPools() {
	s.mu.Lock()
	pools := len(s.pools.byName)
	s.unlock()
	if pools == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
	defer cancel()
	// s.stopping is set: the renewal reports every membership not running.
	if _, err := s.keeper.RenewAll(ctx, s.running); err != nil {
		// Peers then learn of the drain from the releases that follow.
		s.log.Debug("could not mark the pool memberships draining", "err", err)
	}
}
