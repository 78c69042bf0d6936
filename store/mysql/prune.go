package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

var _ store.Pruner = (*Store)(nil)

// pruneBatch is how many records one transaction deletes, so a writer
// waits for it for milliseconds.
var pruneBatch = 1000 // a variable for the tests

// Prune deletes the records under prefix whose term ended at least
// olderThan ago, a batch per transaction, then the sessions dead as long
// with no record on them.
//
// Each batch reads its candidates without locking, then, in a
// transaction, locks the floor row first, then (shared) the sessions the
// candidates are on, then the candidates, decides which are still dead
// on the clock read once all are held, raises the floor and deletes them.
// A session's expiry grows only while it lives, and a renewal that would
// grow it waits for the shared lock, so one read under that lock decides
// for good. An insert of a new key reads the floor with a shared lock, so
// it waits until the prune commits and then starts above every epoch
// deleted; a takeover of a record being deleted waits for the record and
// finds it gone. Past the floor row (which no writer holding a session
// waits for), a prune takes sessions, then records, the order of every
// writer (session.go). Should InnoDB still find a deadlock, it rolls one
// statement back whole: a renewal goes again (execOn), a prune batch
// fails and a later prune deletes the record; neither writes anything
// unsafe.
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
			break
		}
		after = last // the next batch reads on from here, not from the prefix
	}
	if err := s.pruneSessions(ctx, olderThan); err != nil {
		return total, fmt.Errorf("mysql: prune %q: sessions: %w", prefix, err)
	}
	return total, nil
}

// pruneBatch reads up to pruneBatch candidates past key after, then
// deletes those still dead in one transaction (see Prune). It returns how
// many it deleted and the last candidate, or "" when there were fewer than
// a batch.
func (s *Store) pruneBatch(ctx context.Context, prefix, after string, olderThan time.Duration) (int, string, error) {
	query, args := s.q.pruneBatchAll, []any{hexString(prefix)}
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		query, args = s.q.pruneBatch, append(args, hexString(end))
	}
	args = append(args, hexString(after), olderThan.Microseconds(), pruneBatch)
	var (
		candidates []string
		sessions   []int64
	)
	err := s.query(ctx, query, args, func(rows *sql.Rows) error {
		var (
			key []byte
			on  int64
		)
		if err := rows.Scan(&key, &on); err != nil {
			return err
		}
		candidates = append(candidates, hexString(string(key)))
		if on != 0 {
			sessions = append(sessions, on)
		}
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
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	age := olderThan.Microseconds()

	var deleted int
	_, err = inTx(ctx, s.db, func(tx *sql.Tx) (bool, error) {
		deleted = 0
		var floor int64
		if err := tx.QueryRowContext(ctx, s.q.lockFloor).Scan(&floor); err != nil {
			return false, fmt.Errorf("lock the epoch floor: %w", err)
		}
		// The expiry of each session locked (0: gone); a candidate on a
		// session not in it moved onto a live one since the read.
		expiry := make(map[int64]int64, len(sessions))
		for _, id := range sessions {
			expiry[id] = 0
		}
		if len(sessions) > 0 {
			err := queryOn(ctx, tx, s.q.shareSessions, []any{idsDoc(sessions)}, func(rows *sql.Rows) error {
				var id, exp int64
				err := rows.Scan(&id, &exp)
				expiry[id] = exp
				return err
			})
			if err != nil {
				return false, err
			}
		}
		var keys []string
		var maxEpoch int64
		err := queryOn(ctx, tx, s.q.lockDead, []any{string(arg)}, func(rows *sql.Rows) error {
			var (
				key                     []byte
				epoch, on, expires, now int64
			)
			if err := rows.Scan(&key, &epoch, &on, &expires, &now); err != nil {
				return err
			}
			if on != 0 {
				exp, locked := expiry[on]
				if !locked {
					return nil
				}
				expires = exp
			}
			if expires+age <= now {
				keys = append(keys, hexString(string(key)))
				maxEpoch = max(maxEpoch, epoch)
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return false, err
		}
		doc, err := json.Marshal(keys)
		if err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, s.q.raiseFloor, maxEpoch); err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, s.q.deleteKeys, string(doc)); err != nil {
			return false, err
		}
		deleted = len(keys)
		return true, nil
	})
	if err != nil {
		return 0, "", err
	}
	return deleted, last, nil
}

// pruneSessions deletes the sessions dead for olderThan with no record on
// them: a plain read of the candidates, then a delete of those still so,
// which locks them alone.
func (s *Store) pruneSessions(ctx context.Context, olderThan time.Duration) error {
	var ids []int64
	err := s.query(ctx, s.q.pruneSessionCandidates, []any{olderThan.Microseconds()}, func(rows *sql.Rows) error {
		var id int64
		err := rows.Scan(&id)
		ids = append(ids, id)
		return err
	})
	if err != nil || len(ids) == 0 {
		return err
	}
	_, err = s.exec(ctx, s.q.pruneSessions, idsDoc(ids), olderThan.Microseconds())
	return err
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
