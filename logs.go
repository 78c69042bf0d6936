package tenure

import (
	"context"
	"log/slog"
)

// pendingLog is a log record made under the supervisor's lock. Records are
// written only once the lock is released (unlock): a log handler may block
// — a full stderr pipe, a stuck log shipper — and nothing that needs the
// lock may wait on it.
type pendingLog struct {
	level slog.Level
	msg   string
	args  []any
}

// logLocked queues a record; s.mu is held.
func (s *Supervisor) logLocked(level slog.Level, msg string, args ...any) {
	s.pendingLogs = append(s.pendingLogs, pendingLog{level, msg, args})
}

// unlock releases s.mu, then writes the records queued under it.
func (s *Supervisor) unlock() {
	logs := s.pendingLogs
	s.pendingLogs = nil
	s.mu.Unlock()
	for _, l := range logs {
		s.log.Log(context.Background(), l.level, l.msg, l.args...)
	}
}
