package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

var _ store.Pruner = (*Store)(nil)

// pruneBatch is how many records one transaction deletes, so a writer
// waits for it for milliseconds.
const pruneBatch = 1000

// Prune deletes the records under prefix whose term ended at least
// olderThan ago, a batch per transaction.
//
// Each transaction locks the floor row first, then its batch, then raises
// the floor and deletes. An insert of a new key reads the floor with a
// shared lock, so it waits until the prune commits and then starts above
// every epoch deleted; a takeover of a record being deleted waits for the
// record and finds it gone. Neither holds a lock the prune waits for while
// waiting itself, so they never deadlock.
func (s *Store) Prune(ctx context.Context, prefix string, olderThan time.Duration) (_ int, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidatePrune(olderThan); err != nil {
		return 0, err
	}
	if err := s.access.Write(ctx); err != nil {
		return 0, err
	}
	if _, err := s.exec(ctx, s.q.floorRow); err != nil {
		return 0, fmt.Errorf("mysql: prune %q: %w", prefix, err)
	}
	total := 0
	for {
		n, err := s.pruneBatch(ctx, prefix, olderThan)
		total += n
		if err != nil {
			return total, fmt.Errorf("mysql: prune %q: %w", prefix, err)
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}

func (s *Store) pruneBatch(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var floor int64
	if err := tx.QueryRowContext(ctx, s.q.lockFloor).Scan(&floor); err != nil {
		return 0, fmt.Errorf("lock the epoch floor: %w", err)
	}
	query, args := s.q.pruneBatchAll, []any{hexString(prefix)}
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		query, args = s.q.pruneBatch, append(args, hexString(end))
	}
	args = append(args, olderThan.Microseconds(), pruneBatch)
	var keys []string
	var maxEpoch int64
	err = queryOn(ctx, tx, query, args, func(rows *sql.Rows) error {
		var key []byte
		var epoch int64
		if err := rows.Scan(&key, &epoch); err != nil {
			return err
		}
		keys = append(keys, hexString(string(key)))
		maxEpoch = max(maxEpoch, epoch)
		return nil
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	arg, err := json.Marshal(keys)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.q.raiseFloor, maxEpoch); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, s.q.deleteKeys, string(arg)); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return len(keys), nil
}
