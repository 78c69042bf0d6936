package storetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
	"github.com/tenure-dev/tenure/store/storetest"
)

// lockingStore adds row locks to a memstore, so the suite's lock test runs
// here too: Renew waits while any of its keys is locked.
type lockingStore struct {
	*memstore.Store
	mu     sync.Mutex
	cond   *sync.Cond
	locked map[string]bool
	now    time.Time // the injected clock, guarded by mu
}

func newLockingStore() *lockingStore {
	s := &lockingStore{locked: map[string]bool{}, now: time.Unix(1_900_000_000, 0)}
	s.cond = sync.NewCond(&s.mu)
	s.Store = memstore.New(memstore.Options{Clock: func() time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.now
	}})
	return s
}

func (s *lockingStore) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	s.mu.Lock()
	for s.anyLocked(items) {
		s.cond.Wait()
	}
	s.mu.Unlock()
	return s.Store.Renew(ctx, owner, ttl, items)
}

func (s *lockingStore) anyLocked(items []store.RenewItem) bool {
	for _, it := range items {
		if s.locked[it.Key] {
			return true
		}
	}
	return false
}

func (s *lockingStore) lock(key string) (unlock func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locked[key] = true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.locked, key)
		s.cond.Broadcast()
	}
}

// TestSuiteOnALockingStore runs the whole suite, the lock test included,
// against a store whose Advance also moves an injected clock.
func TestSuiteOnALockingStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store { return newLockingStore() },
		Advance: func(t *testing.T, s store.Store, d time.Duration) {
			ls := s.(*lockingStore)
			ls.mu.Lock()
			defer ls.mu.Unlock()
			ls.now = ls.now.Add(d)
		},
		Unit:           50 * time.Millisecond,
		InstantAdvance: true,
		Operations:     300,
		LockKey: func(t *testing.T, s store.Store, key string) func() {
			return s.(*lockingStore).lock(key)
		},
	})
}
