package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

var _ store.Pruner = (*Store)(nil)

// pruneBatch is how many records one transaction deletes: small enough
// that the write lock is held for milliseconds, so renewals queue briefly.
var pruneBatch = 1000 // a variable for the tests

// Prune deletes the records under prefix whose term ended at least
// olderThan ago, a batch per transaction. Each transaction first raises
// the floor row to the batch's highest epoch; SQLite runs one writer at a
// time, so no acquisition can see the record gone and the floor not yet
// raised.
func (s *Store) Prune(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if err := store.ValidatePrune(olderThan); err != nil {
		return 0, err
	}
	if err := s.writable("prune"); err != nil {
		return 0, err
	}
	total, after := 0, ""
	for {
		n, last, err := s.pruneBatch(ctx, prefix, after, olderThan)
		total += n
		if err != nil {
			return total, s.fail(fmt.Sprintf("prune %q", prefix), err)
		}
		if n < pruneBatch {
			if err := s.pruneSessions(ctx, olderThan); err != nil {
				return total, s.fail(fmt.Sprintf("prune %q", prefix), err)
			}
			return total, nil
		}
		after = last // the next batch scans on from here, not from the prefix
	}
}

// pruneSessions deletes the sessions dead for olderThan that no record is
// on (session.go).
func (s *Store) pruneSessions(ctx context.Context, olderThan time.Duration) error {
	if err := s.gate.enter(ctx); err != nil {
		return err
	}
	defer s.gate.leave()
	_, err := s.db.ExecContext(ctx, s.q.pruneSessions, olderThan.Microseconds())
	return err
}

// pruneBatch deletes up to pruneBatch records past key after and returns
// how many and the last.
func (s *Store) pruneBatch(ctx context.Context, prefix, after string, olderThan time.Duration) (int, string, error) {
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return 0, "", err
	}
	defer done()

	query, end := s.q.pruneBatchAll, ""
	if e, ok := sqlstore.PrefixEnd(prefix); ok {
		query, end = s.q.pruneBatch, e
	}
	rows, err := tx.QueryContext(ctx, query, prefix, end, olderThan.Microseconds(), pruneBatch, after)
	if err != nil {
		return 0, "", err
	}
	var keys []string
	var maxEpoch, maxChange int64
	for rows.Next() {
		var key string
		var epoch, change int64
		if err := rows.Scan(&key, &epoch, &change); err != nil {
			rows.Close()
			return 0, "", err
		}
		keys = append(keys, key)
		maxEpoch, maxChange = max(maxEpoch, epoch), max(maxChange, change)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, "", err
	}
	arg, err := json.Marshal(keys)
	if err != nil {
		return 0, "", err
	}
	if _, err := tx.ExecContext(ctx, s.q.raiseFloor, maxEpoch, maxChange); err != nil {
		return 0, "", err
	}
	if _, err := tx.ExecContext(ctx, s.q.deleteKeys, string(arg)); err != nil {
		return 0, "", err
	}
	if err := tx.Commit(); err != nil {
		return 0, "", err
	}
	return len(keys), keys[len(keys)-1], nil
}
