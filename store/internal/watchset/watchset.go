// Package watchset is the closed state of a store and the watch goroutines
// running on it, shared by the stores whose Close must end every watch
// (etcd, redis, postgres).
package watchset

import (
	"context"
	"sync"
	"sync/atomic"
)

// Set tracks whether a store is closed and which watches run on it. The
// zero value is an open, empty set.
type Set struct {
	// closed is read on every store call without a lock; mu orders it with
	// Add, so a Watch racing Close is either cancelled and waited for by
	// Close or told that the store is closed.
	closed  atomic.Bool
	mu      sync.Mutex
	next    int
	cancels map[int]context.CancelFunc
	running sync.WaitGroup
}

// Closed reports whether Close has been called.
func (s *Set) Closed() bool { return s.closed.Load() }

// Add registers a watch that cancel ends. The watch calls done exactly
// once, when it has ended and released what it holds; done cancels it too.
// ok is false when the set is closed: nothing was registered, and the
// caller cancels and cleans up on its own.
func (s *Set) Add(cancel context.CancelFunc) (done func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, false
	}
	if s.cancels == nil {
		s.cancels = make(map[int]context.CancelFunc)
	}
	id := s.next
	s.next++
	s.cancels[id] = cancel
	s.running.Add(1)
	return func() {
		s.mu.Lock()
		delete(s.cancels, id)
		s.mu.Unlock()
		cancel()
		s.running.Done()
	}, true
}

// Close marks the set closed, cancels every watch and waits until each has
// called its done. It reports false, at once, when the set was closed
// already.
func (s *Set) Close() bool {
	s.mu.Lock()
	already := s.closed.Swap(true)
	for _, cancel := range s.cancels {
		cancel()
	}
	s.mu.Unlock()
	if already {
		return false
	}
	s.running.Wait()
	return true
}
