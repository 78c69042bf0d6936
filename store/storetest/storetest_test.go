package storetest_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
	"github.com/tenure-dev/tenure/store/storetest"
)

// lockingStore adds row locks to a memstore, so the suite's lock tests run
// here too: Acquire and Renew wait while any of their keys is locked, or
// until their ctx ends.
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

func (s *lockingStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := s.wait(ctx, req.Key); err != nil {
		return store.AcquireResult{}, err
	}
	return s.Store.Acquire(ctx, req)
}

func (s *lockingStore) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	if err := s.wait(ctx, keys...); err != nil {
		return nil, err
	}
	return s.Store.Renew(ctx, owner, ttl, items)
}

// wait blocks while any of keys is locked, or until ctx ends.
func (s *lockingStore) wait(ctx context.Context, keys ...string) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cond.Broadcast()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for slices.ContainsFunc(keys, func(k string) bool { return s.locked[k] }) {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
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
