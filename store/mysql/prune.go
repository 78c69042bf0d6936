package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

var _ store.Pruner = (*Store)(nil)

// pruneBatch is how many records one transaction deletes, so a writer
// waits for it for milliseconds.
var pruneBatch = 1000 // a variable for the tests

// Prune deletes the records under prefix whose term ended at least
// olderThan ago, a batch per transaction.
//
// Each batch reads its candidates without locking, then, in a
// transaction, locks the floor row first, then the candidates still dead,
// then raises the floor and deletes. An insert of a new key reads the floor with a
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
	if err := s.ensureFloor(ctx); err != nil {
		return 0, fmt.Errorf("mysql: prune %q: %w", prefix, err)
	}
	total, after := 0, ""
	for {
		n, last, err := s.pruneBatch(ctx, prefix, after, olderThan)
		total += n
		if err != nil {
			return total, fmt.Errorf("mysql: prune %q: %w", prefix, err)
		}
		if last == "" {
			return total, nil
		}
		after = last // the next batch reads on from here, not from the prefix
	}
}

// pruneBatch reads up to pruneBatch candidates past key after, then, in
// one transaction, locks the floor row and the candidates still dead,
// raises the floor and deletes them. It returns how many it deleted and
// the last candidate, or "" when there were fewer than a batch.
func (s *Store) pruneBatch(ctx context.Context, prefix, after string, olderThan time.Duration) (int, string, error) {
	query, args := s.q.pruneBatchAll, []any{hexString(prefix)}
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		query, args = s.q.pruneBatch, append(args, hexString(end))
	}
	args = append(args, hexString(after), olderThan.Microseconds(), pruneBatch)
	var candidates []string
	err := s.query(ctx, query, args, func(rows *sql.Rows) error {
		var key []byte
		if err := rows.Scan(&key); err != nil {
			return err
		}
		candidates = append(candidates, hexString(string(key)))
		return nil
	})
	if err != nil || len(candidates) == 0 {
		return 0, "", err
	}
	last := ""
	if len(candidates) == pruneBatch {
		k, err := hex.DecodeString(candidates[len(candidates)-1])
		if err != nil {
			return 0, "", err
		}
		last = string(k)
	}
	arg, err := json.Marshal(candidates)
	if err != nil {
		return 0, "", err
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, "", err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var floor int64
	if err := tx.QueryRowContext(ctx, s.q.lockFloor).Scan(&floor); err != nil {
		return 0, "", fmt.Errorf("lock the epoch floor: %w", err)
	}
	var keys []string
	var maxEpoch int64
	err = queryOn(ctx, tx, s.q.lockDead, []any{string(arg), olderThan.Microseconds()}, func(rows *sql.Rows) error {
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
		return 0, last, err
	}
	if arg, err = json.Marshal(keys); err != nil {
		return 0, "", err
	}
	if _, err := tx.ExecContext(ctx, s.q.raiseFloor, maxEpoch); err != nil {
		return 0, "", err
	}
	if _, err := tx.ExecContext(ctx, s.q.deleteKeys, string(arg)); err != nil {
		return 0, "", err
	}
	if err := tx.Commit(); err != nil {
		return 0, "", err
	}
	return len(keys), last, nil
}

// ensureFloor makes the floor row exist, once per Store. An insert reads
// the floor with a shared lock; on a missing row that lock is a gap lock,
// and two inserts of new keys into that gap, each holding it and waiting
// to insert, deadlock (16 first calls on a fresh table did). On the row
// it is a record lock, which no insert of a lease key waits for.
func (s *Store) ensureFloor(ctx context.Context) error {
	if s.floorReady.Load() {
		return nil
	}
	if _, err := s.exec(ctx, s.q.floorRow); err != nil {
		return err
	}
	s.floorReady.Store(true)
	return nil
}
