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
					// As good as a new subscription: read it all again.
					s.following(true)
					s.onSubscribed()
					continue
				}
				s.onEvent(ev)
				if ev.Kind == store.Released {
					s.onReleased(ev.Key)
				}
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
