package poolsim

import (
	"context"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/poolcoord"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// round is one worker's turn, as the engine plays it: renew everything in
// one call (skipped on a recheck), read the lease table, plan, release,
// claim in order until the store refuses.
func (s *Sim) round(ctx context.Context, w *worker, renew bool) error {
	s.totals.Plans++
	w.recheck = time.Time{}
	if renew {
		w.next = s.now.Add(s.cfg.ClaimInterval + s.randDur(s.cfg.Jitter))
		if err := s.renew(ctx, w); err != nil {
			return err
		}
	}
	leases, err := s.st.List(ctx, "")
	if err != nil {
		return fmt.Errorf("poolsim: %s: %w", w.id, err)
	}
	// The worker plans through the engine's own pool coordinator, on the
	// table as the engine's holder sees it.
	var table []poolcoord.Entry
	for _, l := range leases {
		if l.HeldOrInGrace(s.cfg.Grace) {
			table = append(table, poolcoord.Entry{Key: l.Key, Owner: l.Owner, Live: l.Live, Running: l.Running})
		}
	}
	self := poolcoord.Self{
		Member:  true,
		Settled: s.now.Sub(w.joinedAt) >= s.cfg.ClaimInterval,
		HeldSince: func(leaseKey string) (time.Time, bool) {
			if k, ok := w.coord.PoolKey(leaseKey); ok && w.held[k] != nil {
				return w.held[k].since, true
			}
			return time.Time{}, false
		},
	}
	r := w.coord.Plan(s.now, self, table)
	if !s.cfg.NoRecheck && !r.Recheck.IsZero() && r.Recheck.After(s.now) && r.Recheck.Before(w.next) {
		w.recheck = r.Recheck
	}
	plan := struct{ Release, Claim []string }{s.poolKeys(w, r.Release), s.poolKeys(w, r.Claim)}

	var terms []store.Term
	for _, k := range plan.Release {
		t := w.held[k]
		if t == nil {
			continue
		}
		if s.trace != nil {
			s.trace("%v release %s by %s (held %v, %d held)", s.now.Sub(s.start), k, w.id, s.now.Sub(t.since), len(w.held))
		}
		terms = append(terms, store.Term{Key: w.coord.LeaseKey(k), Epoch: t.epoch})
		s.totals.Released++
		if s.now.Sub(t.since) < s.cfg.MinHold {
			s.totals.FreshSheds++
		}
	}
	if len(terms) > 0 {
		if err := s.st.Release(ctx, w.id, terms); err != nil {
			return fmt.Errorf("poolsim: %s: %w", w.id, err)
		}
		for _, t := range terms {
			k, _ := w.coord.PoolKey(t.Key)
			delete(w.held, k)
			s.released(w.id, k, t.Epoch)
		}
		s.pushed(w)
	}

	for _, k := range plan.Claim {
		if w.held[k] != nil {
			continue
		}
		res, err := s.st.Acquire(ctx, store.AcquireRequest{Key: w.coord.LeaseKey(k), Owner: w.id, TTL: s.cfg.TTL, Grace: s.cfg.Grace, Running: true})
		if err != nil {
			return fmt.Errorf("poolsim: %s: %w", w.id, err)
		}
		if !res.Acquired {
			// The view was stale or the key is inside a crashed holder's
			// grace: plan again next round.
			s.totals.Refusals++
			break
		}
		s.acquired(w, k, res.Epoch)
	}
	return nil
}

// renew extends the worker's membership and every key it holds in one
// call; a refused key is dropped at once (its runner would be stopped).
func (s *Sim) renew(ctx context.Context, w *worker) error {
	keys := sortedKeys(w.held)
	items := make([]store.RenewItem, 0, len(keys)+1)
	items = append(items, store.RenewItem{Key: w.member, Epoch: w.memberEpoch, Running: true})
	for _, k := range keys {
		items = append(items, store.RenewItem{Key: w.coord.LeaseKey(k), Epoch: w.held[k].epoch, Running: true})
	}
	ok, err := s.st.Renew(ctx, w.id, s.cfg.TTL, items)
	if err != nil {
		return fmt.Errorf("poolsim: %s: %w", w.id, err)
	}
	if !ok[0] {
		// Membership lapsed (it cannot in this simulator unless a test
		// stages it): take it again so the worker stays a member.
		res, err := s.st.Acquire(ctx, store.AcquireRequest{Key: w.member, Owner: w.id, TTL: s.cfg.TTL, Grace: s.cfg.Grace, Running: true})
		if err != nil {
			return fmt.Errorf("poolsim: %s: %w", w.id, err)
		}
		if res.Acquired {
			w.memberEpoch = res.Epoch
		}
	}
	deadline := s.now.Add(s.cfg.TTL)
	for i, k := range keys {
		t := w.held[k]
		if !ok[i+1] {
			s.totals.Lost++
			delete(w.held, k)
			continue
		}
		t.deadline = deadline
		if kl := s.keys[k]; kl.holder == w.id && kl.epoch == t.epoch {
			kl.expiry = deadline
		}
	}
	return nil
}

// acquired records a new term of k for w.
func (s *Sim) acquired(w *worker, k string, epoch int64) {
	s.totals.Acquires++
	kl := s.keys[k]
	switch {
	case !kl.ever:
		s.episodes = append(s.episodes, episode{key: k, from: s.start, to: s.now})
	case s.now.Before(kl.expiry) && kl.holder != w.id:
		s.totals.Overlaps++ // the store granted a term our record says is live
	case !s.now.Before(kl.expiry):
		s.episodes = append(s.episodes, episode{key: k, from: kl.expiry, to: s.now})
	}
	if kl.ever && kl.holder != w.id {
		if s.trace != nil {
			s.trace("%v move %s %s→%s", s.now.Sub(s.start), k, kl.holder, w.id)
		}
		s.totals.Moves++
		if kl.moved && s.now.Sub(kl.lastMove) < s.cfg.MinHold {
			s.totals.Bounces++
		}
		kl.lastMove, kl.moved = s.now, true
	}
	// Another running worker that still believes it holds k overlaps.
	for _, id := range s.joined {
		if o := s.workers[id]; o != w && o.alive {
			if t := o.held[k]; t != nil && s.now.Before(t.deadline) {
				s.totals.Overlaps++
			}
		}
	}
	if crashed, ok := s.crashWatch[k]; ok {
		s.recoveries = append(s.recoveries, episode{key: k, from: crashed, to: s.now})
		delete(s.crashWatch, k)
	}
	kl.holder, kl.epoch, kl.expiry, kl.ever = w.id, epoch, s.now.Add(s.cfg.TTL), true
	w.held[k] = &term{epoch: epoch, since: s.now, deadline: s.now.Add(s.cfg.TTL)}
}

// released records that owner ended its term of k now.
func (s *Sim) released(owner, k string, epoch int64) {
	if kl := s.keys[k]; kl.holder == owner && kl.epoch == epoch && s.now.Before(kl.expiry) {
		kl.expiry = s.now
	}
}

// sample records the keys each active worker holds, and checks the
// simulator's record and every worker's belief against the store.
func (s *Sim) sample() {
	s.nextSample = s.nextSample.Add(s.cfg.ClaimInterval)
	counts := make(map[string]int)
	for _, id := range s.Active() {
		counts[id] = 0
	}
	live := make(map[string]string, len(s.keys))
	for k, kl := range s.keys {
		if kl.ever && s.now.Before(kl.expiry) {
			live[k] = kl.holder
			if _, ok := counts[kl.holder]; ok {
				counts[kl.holder]++
			}
		}
	}
	s.samples = append(s.samples, Sample{At: s.now, Counts: counts})

	leases, err := s.st.List(context.Background(), "")
	if err != nil {
		s.totals.Inconsistent++
		return
	}
	inStore := make(map[string]string, len(leases))
	for _, l := range leases {
		if _, _, k, ok := poolkey.ParseKey(l.Key); ok && l.Live && s.keySet[k] {
			inStore[k] = l.Owner
		}
	}
	for k := range s.keys {
		if live[k] != inStore[k] {
			s.totals.Inconsistent++
		}
	}
	for _, id := range s.joined {
		w := s.workers[id]
		if !w.alive {
			continue
		}
		for k, t := range w.held {
			if o, ok := inStore[k]; ok && o != id && s.now.Before(t.deadline) {
				s.totals.Overlaps++
			}
		}
	}
}

// poolKeys are the source's keys of the lease keys a plan names.
func (s *Sim) poolKeys(w *worker, leaseKeys []string) []string {
	out := make([]string, 0, len(leaseKeys))
	for _, lk := range leaseKeys {
		if k, ok := w.coord.PoolKey(lk); ok {
			out = append(out, k)
		}
	}
	return out
}
