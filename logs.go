package tenure

import (
	"context"
	"log/slog"
)

// While Run runs, the supervisor's records wait in a queue
// (internal/logqueue) of logqueue.DefaultSize, written by a goroutine of
// its own, before more are dropped (and counted). The loops that renew
// leases and start work log as they go; with a handler that blocks (a
// full stderr pipe, a stuck log shipper) they would stop with it, and a
// replica whose store answers would lose every key at its deadline.

// Log records and observer calls made under the supervisor's lock run only
// once the lock is released (unlock): a log handler may block — a full
// stderr pipe, a stuck log shipper — and an Observer is user code, and
// nothing that needs the lock (stopping the runner of a lost lease, for
// one) may wait on either.

// afterUnlock queues f to run once s.mu is released; s.mu is held.
func (s *Supervisor) afterUnlock(f func()) {
	s.pending = append(s.pending, f)
}

// logLocked queues a log record; s.mu is held.
func (s *Supervisor) logLocked(level slog.Level, msg string, args ...any) {
	s.afterUnlock(func() { s.log.Log(context.Background(), level, msg, args...) })
}

// observeLocked queues an observer call; s.mu is held.
func (s *Supervisor) observeLocked(f func(Observer)) {
	s.afterUnlock(func() { f(s.obs) })
}

// unlock releases s.mu, then runs what was queued under it, in order.
func (s *Supervisor) unlock() {
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, f := range pending {
		f()
	}
}
