package tenure

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// Set adds key with job, or replaces its job. It is accepted on every
// replica; only the lease holder (or every replica, for Everywhere) runs
// it. A running runner whose job changed is restarted with the new job
// under the same term.
func (s *Supervisor) Set(key string, job Job) error {
	if err := store.ValidateKey(key); err != nil {
		return err
	}
	if !strings.HasPrefix(key, s.cfg.Prefix) {
		return fmt.Errorf("key %q is outside Config.Prefix %q: this supervisor lists and watches only keys under it: %w", key, s.cfg.Prefix, ErrConfig)
	}
	if poolkey.Reserved(key) {
		return fmt.Errorf("key %q holds %q or %q, which are reserved for pools: %w", key, PoolPrefix, WorkerPrefix, ErrConfig)
	}
	if holdsRecordInfix(key) {
		return fmt.Errorf("key %q holds one of %q, which mark the records Tenure keeps next to a key: %w", key, recordInfixes, ErrConfig)
	}
	if err := job.crashLoop(s.cfg).reachable(s.cfg); s.leased && err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	if job.Schedule != nil && !s.leased {
		return fmt.Errorf("key %q: a scheduled job needs leases (a store): %w", key, ErrConfig)
	}
	if job.Schedule != nil && len(key) > MaxScheduledKeyBytes {
		return fmt.Errorf("key %q is %d bytes; a scheduled key may have at most %d, to leave room for the records of its periods: %w", key, len(key), MaxScheduledKeyBytes, ErrConfig)
	}
	if err := job.validate(); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{key: key}
		s.keys[key] = ks
	}
	changed := ks.configured && ks.run != nil && !sameJob(*ks.job, job)
	ks.job, ks.configured, ks.done = &job, true, false
	if changed {
		ks.restart = true
		ks.run.stop(ErrRestart)
	}
	s.unlock()
	s.poke()
	return nil
}

func sameJob(a, b Job) bool {
	return a.Mode == b.Mode && a.Disabled == b.Disabled && a.Schedule == b.Schedule && a.NoRetry == b.NoRetry && sameRunner(a.Runner, b.Runner)
}

// sameRunner compares runners that are comparable; func-typed runners
// (RunnerFunc) never compare equal, so setting one counts as a change.
func sameRunner(a, b Runner) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// Remove stops key's runner, releases its lease once the runner has
// returned, and forgets the key. It waits up to StopTimeout (or ctx); a
// runner still alive then keeps its lease renewed until it returns, and
// Remove reports ErrStopTimeout. A pool's keys are refused (ErrConfig):
// its source says which of them run.
func (s *Supervisor) Remove(ctx context.Context, key string) error {
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil || !ks.configured {
		s.unlock()
		return fmt.Errorf("key %q: %w", key, ErrUnknownKey)
	}
	if err := poolOwned(ks); err != nil {
		s.unlock()
		return err
	}
	ks.configured = false
	if ks.removed == nil {
		ks.removed = make(chan struct{})
	}
	removed := ks.removed
	if !s.active {
		// Between Runs. A runner that outlived the last Run's stop (it
		// took longer than StopTimeout) still runs on its term: the record
		// stays until it has returned and the next Run has released the
		// term, so that a Set of the key meanwhile finds it, and never
		// starts a second runner beside it, whose lease the old record
		// would then release.
		if ks.phase() == idle {
			s.finishRemoval(ks)
		}
		s.unlock()
		return nil
	}
	if ks.run != nil {
		ks.run.stop(ErrKeyRemoved)
	}
	s.reconcileKeyNow(ks)
	s.unlock()
	s.poke()
	return s.await(ctx, key, removed)
}

// SetEnabled enables or disables key. Disabling stops its runner and
// releases its lease once the runner has returned. A pool's keys are
// refused (ErrConfig): its source says which of them run.
func (s *Supervisor) SetEnabled(key string, enabled bool) error {
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil || !ks.configured {
		s.unlock()
		return fmt.Errorf("key %q: %w", key, ErrUnknownKey)
	}
	if err := poolOwned(ks); err != nil {
		s.unlock()
		return err
	}
	job := *ks.job // replaced, not written to (keyState.job)
	job.Disabled = !enabled
	ks.job = &job
	if ks.run != nil && !enabled {
		ks.run.stop(ErrKeyRemoved)
	}
	s.unlock()
	s.poke()
	return nil
}

// poolOwned refuses to remove or disable ks on its own when a pool
// manages it: the pool's next plan would claim it again at once, so the
// call would seem to work and be undone within a round. s.mu is held.
func poolOwned(ks *keyState) error {
	switch {
	case ks.pool != nil:
		return fmt.Errorf("key %q belongs to pool %s, whose source says which keys it runs: change the source instead: %w", ks.key, ks.pool.cfg.Name, ErrConfig)
	case ks.member != nil:
		return fmt.Errorf("key %q is this worker's membership of a pool: %w", ks.key, ErrConfig)
	}
	return nil
}

func (s *Supervisor) await(ctx context.Context, key string, done <-chan struct{}) error {
	t := time.NewTimer(s.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("key %q: %w; its lease is kept until it returns", key, ErrStopTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Restart stops key's runner and starts it again under the same term. It
// returns false, starting nothing, when this replica does not hold the key.
func (s *Supervisor) Restart(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil || !ks.wantsRun() {
		s.unlock()
		return false, fmt.Errorf("key %q: %w", key, ErrUnknownKey)
	}
	if s.leased && ks.job.Mode == Exclusive && !s.keeper.Holds(key) {
		s.unlock()
		return false, nil
	}
	r := ks.run
	if ks.fails != nil {
		ks.fails.count, ks.fails.retryAt = 0, time.Time{}
	}
	if r != nil {
		ks.restart = true
		r.stop(ErrRestart)
	}
	s.unlock()
	if r != nil {
		if err := s.await(ctx, key, r.done); err != nil {
			return false, err
		}
	}
	return s.EnsureRunning(ctx, key)
}

// EnsureRunning makes sure key's runner runs here if this replica holds
// (or can acquire) its lease, and reports whether it runs. It never starts
// a runner on a non-holder.
func (s *Supervisor) EnsureRunning(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	ks := s.keys[key]
	if ks == nil || !ks.wantsRun() {
		s.unlock()
		return false, fmt.Errorf("key %q: %w", key, ErrUnknownKey)
	}
	if !s.active || s.stopping {
		s.unlock()
		return false, ErrNotRunning
	}
	needLease := s.leased && ks.job.Mode == Exclusive
	s.unlock()
	if needLease {
		res, err := s.keeper.Acquire(ctx, key, false)
		if err != nil {
			return false, err
		}
		if !res.OK {
			return false, nil
		}
		s.mu.Lock()
		if s.stopping || !s.active {
			// Shutdown began while the acquisition was out, and may have
			// released what it held already: hand this new term back too.
			s.unlock()
			if t, ok := s.keeper.Term(key); ok && res.New && t.Epoch == res.Epoch {
				rctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
				defer cancel()
				if err := s.keeper.Release(rctx, t); err != nil {
					s.log.Warn("could not release lease; retrying each round until its term ends", "key", key, "epoch", t.Epoch, "err", err)
				}
			}
			return false, ErrNotRunning
		}
		if res.New {
			ks.newTerm = true
		}
		s.unlock()
	}
	s.mu.Lock()
	if ks.run != nil {
		running := !ks.run.stopped()
		s.unlock()
		return running, nil
	}
	switch ks.phase() {
	case starting:
		s.unlock()
		return true, nil
	case releasing:
		// The lease is being handed back: a start now would run on a term
		// that ends in a moment.
		s.unlock()
		return false, nil
	}
	ks.pending = starting
	if ks.fails != nil {
		ks.fails.retryAt = time.Time{}
	}
	s.unlock()
	s.start(key)
	s.mu.Lock()
	defer s.unlock()
	return ks.run != nil, nil
}
