package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

// Acquire starts a new term of req.Key for req.Owner when the store's rules
// allow it; otherwise it returns the blocking lease, read in the same
// transaction.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, err
	}
	if err := s.writable("acquire"); err != nil {
		return store.AcquireResult{}, err
	}
	res, err := s.acquire(ctx, req)
	if err == nil {
		err = ctx.Err() // an answer that came too late is unconfirmed
	}
	if err != nil {
		return store.AcquireResult{}, s.fail(fmt.Sprintf("acquire %q", req.Key), err)
	}
	if res.Acquired {
		s.hub.publish(store.Event{Kind: store.Acquired, Key: req.Key, Owner: req.Owner, Epoch: res.Epoch})
	}
	return res, nil
}

func (s *Store) acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := s.gate.enter(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	defer s.gate.leave()
	// The DSN's _txlock=immediate makes this BEGIN IMMEDIATE: the write
	// lock is held from the start, so the refusal and the holder we report
	// come from one state.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.AcquireResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	var epoch int64
	err = tx.QueryRowContext(ctx, s.q.acquire,
		req.Key, req.Owner, req.TTL.Microseconds(), boolInt(req.Running), req.Grace.Microseconds(), s.hub.origin,
	).Scan(&epoch)
	switch {
	case err == nil:
		if err := tx.Commit(); err != nil {
			return store.AcquireResult{}, err
		}
		return store.AcquireResult{Acquired: true, Epoch: epoch}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return store.AcquireResult{}, err
	}

	holder := store.Lease{Key: req.Key}
	var released, running int64
	var leftUS int64
	if err := tx.QueryRowContext(ctx, s.q.holder, req.Key).Scan(
		&holder.Owner, &holder.Epoch, &released, &running, &leftUS); err != nil {
		return store.AcquireResult{}, fmt.Errorf("read holder: %w", err)
	}
	fillLease(&holder, released, running, leftUS)
	if err := tx.Commit(); err != nil {
		return store.AcquireResult{}, err
	}
	return store.AcquireResult{Holder: holder}, nil
}

// Renew extends every listed term of owner in one statement. Items naming
// the same term twice get the same answer; the runner state of the last one
// is recorded.
func (s *Store) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if err := store.ValidateRenew(owner, ttl, items); err != nil {
		return nil, err
	}
	if err := s.writable("renew"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, s.fail("renew", err)
	}
	out := make([]bool, len(items))
	if len(items) == 0 {
		return out, nil
	}

	// Deduplicate so that the statement sees each term once and the last
	// runner state wins, whatever order SQLite joins in.
	index := make(map[store.Term]int, len(items))
	rows := make([][3]any, 0, len(items))
	for _, it := range items {
		t := store.Term{Key: it.Key, Epoch: it.Epoch}
		if i, ok := index[t]; ok {
			rows[i][2] = boolInt(it.Running)
			continue
		}
		index[t] = len(rows)
		rows = append(rows, [3]any{it.Key, it.Epoch, boolInt(it.Running)})
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return nil, s.fail("renew", err)
	}

	renewed := make(map[store.Term]bool, len(rows))
	err = s.write(ctx, s.q.renew, func(t store.Term) { renewed[t] = true }, owner, ttl.Microseconds(), string(arg))
	if err == nil {
		// Never report a renewal the caller's deadline has already passed
		// on: it would extend a deadline the caller no longer protects.
		err = ctx.Err()
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("renew %d terms", len(items)), err)
	}
	for i, it := range items {
		out[i] = renewed[store.Term{Key: it.Key, Epoch: it.Epoch}]
	}
	return out, nil
}

// Release ends every listed term of owner now, in one statement, and tells
// this process's watchers.
func (s *Store) Release(ctx context.Context, owner string, terms []store.Term) error {
	if err := store.ValidateRelease(owner, terms); err != nil {
		return err
	}
	if err := s.writable("release"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return s.fail("release", err)
	}
	if len(terms) == 0 {
		return nil
	}
	pairs := make([][2]any, len(terms))
	for i, t := range terms {
		pairs[i] = [2]any{t.Key, t.Epoch}
	}
	arg, err := json.Marshal(pairs)
	if err != nil {
		return s.fail("release", err)
	}
	var ended []store.Term
	err = s.write(ctx, s.q.release, func(t store.Term) { ended = append(ended, t) }, owner, string(arg), s.hub.origin)
	// Publish what the statement returned even when ctx ended meanwhile:
	// those releases happened.
	for _, t := range ended {
		s.hub.publish(store.Event{Kind: store.Released, Key: t.Key, Owner: owner, Epoch: t.Epoch})
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return s.fail(fmt.Sprintf("release %d terms", len(terms)), err)
	}
	return nil
}

// write runs a writing statement that returns (key, epoch) rows and hands
// each to fn.
func (s *Store) write(ctx context.Context, query string, fn func(store.Term), args ...any) error {
	if err := s.gate.enter(ctx); err != nil {
		return err
	}
	defer s.gate.leave()
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var t store.Term
		if err := rows.Scan(&t.Key, &t.Epoch); err != nil {
			return err
		}
		fn(t)
	}
	return rows.Err()
}

// List returns every lease whose key starts with prefix (byte for byte),
// sorted by key, with liveness and time left on SQLite's clock.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if s.isClosed() {
		return nil, s.fail("list", store.ErrClosed)
	}
	var rows *sql.Rows
	var err error
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		rows, err = s.db.QueryContext(ctx, s.q.list, prefix, end)
	} else {
		rows, err = s.db.QueryContext(ctx, s.q.listAll, prefix)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("list %q", prefix), err)
	}
	defer rows.Close()
	var out []store.Lease
	for rows.Next() {
		var l store.Lease
		var released, running, leftUS int64
		if err := rows.Scan(&l.Key, &l.Owner, &l.Epoch, &released, &running, &leftUS); err != nil {
			return nil, s.fail(fmt.Sprintf("list %q", prefix), err)
		}
		fillLease(&l, released, running, leftUS)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(fmt.Sprintf("list %q", prefix), err)
	}
	return out, nil
}

// Revoke moves key's live term to a new epoch owned by nobody and keeps its
// expiry: the holder is fenced at its next renewal, and peers may acquire
// once expiry + grace has passed, so even a holder that never hears of the
// revocation cannot overlap them. It reports false when the key has no live
// term (none, released, expired or already revoked).
func (s *Store) Revoke(ctx context.Context, key string) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := s.writable("revoke"); err != nil {
		return false, err
	}
	if err := s.gate.enter(ctx); err != nil {
		return false, s.fail(fmt.Sprintf("revoke %q", key), err)
	}
	defer s.gate.leave()
	var epoch int64
	err := s.db.QueryRowContext(ctx, s.q.revoke, key).Scan(&epoch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, s.fail(fmt.Sprintf("revoke %q", key), err)
	}
	return true, nil
}

func fillLease(l *store.Lease, released, running, leftUS int64) {
	l.Released = released != 0
	l.Running = running != 0
	l.TimeLeft = time.Duration(leftUS) * time.Microsecond
	// A revoked term has no owner and is never live, though unexpired.
	l.Live = l.Owner != "" && !l.Released && leftUS > 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
