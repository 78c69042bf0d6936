package tenure

import (
	"context"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/store"
)

// renewLoop renews every held lease once per RenewEvery, on a schedule of
// its own: no acquisition, table read or plan runs on this goroutine, so a
// slow but answering store can delay a renewal by its own latency only,
// never by the sum of every call a round makes.
func (s *Supervisor) renewLoop(ctx context.Context) {
	due := time.Now().Add(s.cfg.RenewEvery)
	retry := false // the next call retries an unconfirmed renewal
	for {
		next := due
		if retry {
			next = time.Now()
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		confirmed := s.renew(ctx)
		if !retry {
			due = due.Add(s.cfg.RenewEvery)
			if now := time.Now(); due.Before(now) {
				due = now // a renewal took longer than a period: start the next now
			}
		}
		// An unconfirmed renewal is tried again at once rather than a whole
		// period later, when a runner renewed a period ago would already
		// be stopped: the deadline leaves room for one more call (both
		// bounded by CallTimeout ≤ RenewEvery/2), and one call that ran
		// over CallTimeout should not cost the runners their lease.
		retry = !confirmed && !retry
	}
}

// suspendCheckEvery is how often the host is checked for having slept:
// timers run on a clock that stops during a suspend, so after one the
// watchdogs are re-armed on the clock that did not.
const suspendCheckEvery = 250 * time.Millisecond

// watchSuspend re-checks every runner's deadline, within suspendCheckEvery
// of the host resuming from a suspend, so that runners whose deadline
// passed while it slept stop at once rather than a whole timer later.
func (s *Supervisor) watchSuspend(ctx context.Context) {
	last := s.suspended()
	t := time.NewTicker(suspendCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		slept := s.suspended()
		if slept <= last {
			continue
		}
		s.mu.Lock()
		var runs []*runState
		for _, ks := range s.keys {
			if ks.run != nil && ks.run.leased {
				runs = append(runs, ks.run)
			}
		}
		s.unlock()
		clk := s.loopClock()
		for _, r := range runs {
			s.guard(r, clk)
		}
		s.poke()
		// Only now log: a log call may block, and the deadlines above must not wait on it.
		s.log.Warn("the host was suspended; checked every lease's deadline", "slept", slept-last)
		last = slept
	}
}

// renew renews every held lease in one call and stops the runners of the
// leases the store refused. It reports whether the call was confirmed.
func (s *Supervisor) renew(ctx context.Context) bool {
	began := time.Now()
	outcomes, err := s.keeper.RenewAll(ctx, s.running)
	if len(outcomes) > 0 || err != nil {
		s.obs.RenewalCall(time.Since(began))
		s.storeAnswered(err)
	}
	if err != nil {
		s.log.Warn("could not confirm lease renewals; their deadlines keep running", "keys", len(outcomes), "err", err)
	}
	// Stop every lost key's runner before anything is logged: a log call
	// may block, and the next lost key must not wait on it.
	var lost []string
	clk := s.loopClock()
	s.mu.Lock()
	for key, o := range outcomes {
		switch o {
		case hold.Lost:
			// Only a run of the lost term: one of a term acquired since the
			// renewal was answered, or one without a lease, goes on.
			if ks := s.keys[key]; ks != nil && ks.run != nil && ks.run.leased && !s.keeper.HoldsTerm(ks.key, ks.run.lease.Epoch) {
				ks.run.stop(ErrLeaseLost)
			}
			if s.lost == nil {
				s.lost = make(map[string]bool)
			}
			s.lost[key] = true
			lost = append(lost, key)
		case hold.Renewed:
			if ks := s.keys[key]; ks != nil && ks.run != nil && ks.run.leased {
				s.guard(ks.run, clk)
			}
		}
	}
	s.unlock()
	for _, o := range outcomes {
		s.obs.Renewal(o.String())
	}
	for _, key := range lost {
		s.obs.Handover(HandoverLost)
		s.log.Warn("lease lost: another owner or a newer term holds the key", "key", key)
	}
	s.obs.LeasesHeld(s.keeper.HeldCount())
	if len(outcomes) > 0 {
		s.poke() // reconcile: restart what a confirmed renewal allows, stop what was lost
	}
	return err == nil
}

// explainLosses says who took each lease lost since the last read of the
// lease table. A process holding it under this replica's own owner name is
// logged as an error: two replicas were given one name, or a frozen twin
// resumed — either way an operator should know.
func (s *Supervisor) explainLosses() {
	s.mu.Lock()
	lost := s.lost
	s.lost = nil
	s.unlock()
	for key := range lost {
		if l, ok := s.keeper.Observed(key); ok {
			s.lostTo(key, l)
		}
	}
}

// lostTo logs an error when a term this replica held was taken by another
// process under its own owner name.
func (s *Supervisor) lostTo(key string, holder store.Lease) {
	if holder.Owner == "" || holder.Owner == s.owner || OwnerName(holder.Owner) != s.cfg.Owner {
		return
	}
	s.log.Error("lease lost to another process with this replica's owner name: give every replica its own name (Config.Owner, --owner)",
		"key", key, "holder", holder.Owner, "holder_epoch", holder.Epoch, "owner_name", s.cfg.Owner)
}
