package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
)

var _ store.Pruner = (*Store)(nil)

// prunePage is how many keys one prune script call looks at, so Redis
// serves other clients between pages.
var prunePage = 1000 // a variable for the tests

// Prune deletes the records under prefix whose term ended at least
// olderThan ago, a page of keys per script call, and then the sessions
// dead as long that no record is on. Each call raises the
// epoch floor with its deletions atomically; acquisitions are scripts too,
// so none sees a record gone and the floor not yet raised. (Epochs also
// follow the server's clock, so they would grow even without the floor
// unless that clock went back.)
func (s *Store) Prune(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if err := store.ValidatePrune(olderThan); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	lo, hi := lexRange(prefix)
	total := 0
	for {
		reply, err := pruneScript.Run(ctx, s.client, s.keys, lo, hi, micros(olderThan), prunePage).Slice()
		if err != nil {
			return total, s.wrap(fmt.Sprintf("prune %q", prefix), err)
		}
		if len(reply) != 2 {
			return total, fmt.Errorf("redis: prune %q: unexpected reply %v", prefix, reply)
		}
		n, err := toInt(reply[0])
		if err != nil {
			return total, fmt.Errorf("redis: prune %q: %w", prefix, err)
		}
		total += int(n)
		last, _ := reply[1].(string)
		if last == "" {
			break
		}
		lo = "(" + last
	}
	if err := s.pruneSessions(ctx, olderThan); err != nil {
		return total, s.wrap(fmt.Sprintf("prune %q", prefix), err)
	}
	return total, nil
}

// pruneSessions deletes the sessions dead for olderThan that no record is
// on (session.go), a page of sessions per script call. Sessions belong to
// no prefix: every Prune looks at them all, after its records, whose
// deletion may have emptied some.
func (s *Store) pruneSessions(ctx context.Context, olderThan time.Duration) error {
	cursor := "0"
	for {
		reply, err := pruneSessionsScript.Run(ctx, s.client, s.keys, cursor, micros(olderThan), prunePage).Slice()
		if err != nil {
			return fmt.Errorf("sessions: %w", err)
		}
		if len(reply) != 2 {
			return fmt.Errorf("sessions: unexpected reply %v", reply)
		}
		if cursor, _ = reply[0].(string); cursor == "0" || cursor == "" {
			return nil
		}
	}
}
