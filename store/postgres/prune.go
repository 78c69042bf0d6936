package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tenure-dev/tenure/store"
)

var _ store.Pruner = (*Store)(nil)

// pruneBatch is how many records one transaction deletes, so writers wait
// for it for milliseconds. A variable for the tests.
var pruneBatch = 1000

const (
	// pruneLockWait bounds how long a prune waits for its table lock.
	// Writers queue behind a waiting lock request, so a prune stuck
	// behind a long transaction would hold up every renewal; it gives up
	// quickly instead and tries again after pruneRetryPause.
	pruneLockWait   = 200 * time.Millisecond
	pruneRetryPause = 500 * time.Millisecond
	pruneLockTries  = 20
)

// Prune deletes the records under prefix whose term ended at least
// olderThan ago, a batch per transaction.
//
// An INSERT computes its VALUES (the floor included) before it waits for
// a conflicting row, so an acquisition that began while a prune's DELETE
// of its key was uncommitted would insert with the floor it read before:
// no row lock alone can make it see the raised one. Each batch therefore
// takes SHARE ROW EXCLUSIVE on the table, which waits for every running
// writer and holds off new ones until the floor is raised and the rows are
// gone; PostgreSQL takes a statement's table lock before its snapshot, so
// a writer that waited reads the new floor — under READ COMMITTED, which
// Acquire and Prune therefore ask for whatever the connection's default
// (under REPEATABLE READ a prepared statement's snapshot is taken before
// the wait). Readers (List, status) are not blocked.
func (s *Store) Prune(ctx context.Context, prefix string, olderThan time.Duration) (_ int, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidatePrune(olderThan); err != nil {
		return 0, err
	}
	if err := s.access.Write(ctx); err != nil {
		return 0, err
	}
	if strings.IndexByte(prefix, 0) >= 0 {
		return 0, nil // no key holds a NUL
	}
	total, after := 0, ""
	for {
		n, last, err := s.pruneBatchWithRetry(ctx, prefix, after, olderThan)
		total += n
		if err != nil {
			return total, fmt.Errorf("postgres: prune %q: %w", prefix, err)
		}
		if n < pruneBatch {
			// The sessions dead as long, with no record left on them.
			if _, err := s.pool.Exec(ctx, s.sess.pruneSessions, olderThan.Microseconds()); err != nil {
				return total, fmt.Errorf("postgres: prune %q: sessions: %w", prefix, err)
			}
			return total, nil
		}
		after = last // the next batch scans on from here, not from the prefix
	}
}

func (s *Store) pruneBatchWithRetry(ctx context.Context, prefix, after string, olderThan time.Duration) (int, string, error) {
	for try := 1; ; try++ {
		n, last, err := s.pruneBatch(ctx, prefix, after, olderThan)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || try == pruneLockTries { // lock_not_available
			return n, last, err
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(pruneRetryPause):
		}
	}
}

// pruneBatch deletes up to pruneBatch records past key after and returns
// how many and the last.
func (s *Store) pruneBatch(ctx context.Context, prefix, after string, olderThan time.Duration) (int, string, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", pruneLockWait.Milliseconds())); err != nil {
		return 0, "", err
	}
	if _, err := tx.Exec(ctx, s.sql.lock); err != nil {
		return 0, "", err
	}
	var n int
	var maxEpoch int64
	var last string
	err = tx.QueryRow(ctx, s.sql.prune, validPrefix(prefix), olderThan.Microseconds(), []byte(prefix), pruneBatch, after).Scan(&n, &maxEpoch, &last)
	if err != nil || n == 0 {
		return 0, "", err
	}
	if _, err := tx.Exec(ctx, s.sql.raiseFloor, maxEpoch); err != nil {
		return 0, "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, "", err
	}
	return n, last, nil
}
