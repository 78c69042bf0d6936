package tenure

import (
	"context"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// watch turns the store's push events into immediate acquisition attempts,
// re-subscribing after a broken channel; polling covers the gaps.
func (s *Supervisor) watch(ctx context.Context, w store.Watcher) {
	for ctx.Err() == nil {
		events, err := w.Watch(ctx, s.cfg.Prefix)
		if err != nil {
			s.log.Debug("could not watch the store; polling only", "err", err)
		} else {
			s.following(true)
			s.onSubscribed()
			for ev := range events {
				if ev.Kind == store.Missed {
					s.onMissed(events)
					continue
				}
				s.onPushed(ev)
			}
			s.following(false)
		}
		t := time.NewTimer(s.cfg.RenewEvery)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// onPushed takes in one event other than Missed.
func (s *Supervisor) onPushed(ev store.Event) {
	s.onEvent(ev)
	if ev.Kind == store.Released {
		s.onReleased(ev.Key)
	}
}

// onMissed handles the store's word that events were dropped: the view is
// not current until a whole read. A reader that fell behind finds its
// channel full of Missed events (each drop queues one), so it takes in
// everything already queued first and acts once, with one whole read,
// rather than once per Missed. Keys waiting for a release are not retried
// all at once (a burst would multiply into a storm of refused calls): the
// whole read finds what was released, and the round retries those.
func (s *Supervisor) onMissed(events <-chan store.Event) {
	for drained := false; !drained; {
		select {
		case ev, open := <-events:
			if !open {
				drained = true // the caller's loop sees the close too
			} else if ev.Kind != store.Missed {
				s.onPushed(ev)
			}
		default:
			drained = true
		}
	}
	s.following(true)
	s.mu.Lock()
	if len(s.pools.byName) > 0 {
		s.pools.replan = true
	}
	s.unlock()
	s.poke()
}

// onSubscribed retries every wanted key that is not held, at once: a
// release that landed before the subscription existed sent no event.
func (s *Supervisor) onSubscribed() {
	s.mu.Lock()
	for _, ks := range s.keys {
		if ks.wantsLease() && ks.run == nil && !s.keeper.Holds(ks.key) {
			ks.nextAcquire = time.Time{}
		}
	}
	if len(s.pools.byName) > 0 {
		s.pools.replan = true
	}
	s.unlock()
	s.poke()
}

func (s *Supervisor) onReleased(key string) {
	s.mu.Lock()
	if s.pools.concerns(key) {
		s.pools.replan = true
	}
	replan := s.pools.replan
	ks := s.keys[key]
	wanted := ks != nil && ks.wantsLease()
	if wanted {
		ks.nextAcquire = time.Time{}
	}
	s.unlock()
	if wanted || replan {
		s.poke()
	}
}
