package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
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
	// The write lock is held from the start (beginWrite), so the refusal
	// and the holder we report come from one state.
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return store.AcquireResult{}, err
	}
	defer done()

	// The session the key's last term was on, which it leaves.
	var old int64
	if err := tx.QueryRowContext(ctx, s.q.sessionOf, req.Key).Scan(&old); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.AcquireResult{}, err
	}
	var epoch int64
	err = tx.QueryRowContext(ctx, s.q.acquire,
		req.Key, req.Owner, req.TTL.Microseconds(), boolInt(req.Running), req.Grace.Microseconds(), s.hub.origin,
	).Scan(&epoch)
	switch {
	case err == nil:
		// The term starts on its own record: the session the key's last
		// term was on moves to a new version.
		var version sessionbook.Version
		if old != 0 {
			if err := tx.QueryRowContext(ctx, s.q.bumpSession, old).Scan(&version.N, &version.Tag, &version.Prev); err != nil {
				return store.AcquireResult{}, err
			}
		}
		if err := tx.Commit(); err != nil {
			return store.AcquireResult{}, err
		}
		if old != 0 {
			s.book.Left(old, version, store.Term{Key: req.Key})
		}
		s.book.Acquired(req.Owner, req.TTL, req.Key, epoch, req.Running)
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

// Renew extends every listed term of owner in one transaction: one write
// when the terms are those on the Store's session (session.go). Items naming
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

	renewed, err := s.renewTerms(ctx, owner, ttl, items)
	if err == nil {
		// Never report a renewal the caller's deadline has already passed
		// on: it would extend a deadline the caller no longer protects.
		err = ctx.Err()
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("renew %d terms", len(items)), err)
	}
	for i, it := range items {
		out[i] = renewed == nil || renewed[store.Term{Key: it.Key, Epoch: it.Epoch}]
	}
	return out, nil
}

// dedupe returns items as [key, epoch, running] triples, each term once
// with the runner state of its last item, so that a statement sees each
// term once whatever order SQLite joins in.
func dedupe(items []store.RenewItem) [][3]any {
	items = sessionbook.Distinct(items)
	rows := make([][3]any, len(items))
	for i, it := range items {
		rows[i] = [3]any{it.Key, it.Epoch, boolInt(it.Running)}
	}
	return rows
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
	ended, err := s.release(ctx, owner, string(arg))
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

// release ends the terms of pairs (a JSON array of [key, epoch]), and
// moves the sessions they were on to a new version, in one transaction,
// and returns the terms it ended.
func (s *Store) release(ctx context.Context, owner, pairs string) ([]store.Term, error) {
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	on := map[store.Term]int64{} // the session each term was on
	err = scanRows(tx.QueryContext(ctx, s.q.sessionsOf, owner, pairs))(func(rows *sql.Rows) error {
		var t store.Term
		var id int64
		err := rows.Scan(&t.Key, &t.Epoch, &id)
		on[t] = id
		return err
	})
	if err != nil {
		return nil, err
	}
	versions := map[int64]sessionbook.Version{}
	for _, id := range on {
		if _, done := versions[id]; id != 0 && !done {
			var v sessionbook.Version
			if err := tx.QueryRowContext(ctx, s.q.bumpSession, id).Scan(&v.N, &v.Tag, &v.Prev); err != nil {
				return nil, err
			}
			versions[id] = v
		}
	}
	var ended []store.Term
	err = scanTerms(tx.QueryContext(ctx, s.q.release, owner, pairs, s.hub.origin))(func(t store.Term) { ended = append(ended, t) })
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return nil, err
	}
	// One transaction moved each session one version, for all its terms.
	bySession := map[int64][]store.Term{}
	for _, t := range ended {
		bySession[on[t]] = append(bySession[on[t]], t)
	}
	for id, ts := range bySession {
		s.book.Left(id, versions[id], ts...)
	}
	return ended, nil
}

// List returns every lease whose key starts with prefix (byte for byte),
// sorted by key, with liveness and time left on SQLite's clock.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if s.isClosed() {
		return nil, s.fail("list", store.ErrClosed)
	}
	q, err := s.listQueries(ctx)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("list %q", prefix), err)
	}
	var rows *sql.Rows
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		rows, err = s.db.QueryContext(ctx, q.list, prefix, end)
	} else {
		rows, err = s.db.QueryContext(ctx, q.listAll, prefix)
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
	revoked, err := s.revoke(ctx, key)
	if err != nil {
		return false, s.fail(fmt.Sprintf("revoke %q", key), err)
	}
	return revoked, nil
}

// revoke fences key's live term and counts it off its session, in one
// transaction.
func (s *Store) revoke(ctx context.Context, key string) (bool, error) {
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	var on int64
	var t store.Term
	if err := tx.QueryRowContext(ctx, s.q.sessionOf, key).Scan(&on); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	err = tx.QueryRowContext(ctx, s.q.revoke, key).Scan(&t.Epoch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	var version sessionbook.Version
	if on != 0 {
		if err := tx.QueryRowContext(ctx, s.q.bumpSession, on).Scan(&version.N, &version.Tag, &version.Prev); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	if on != 0 {
		s.book.Left(on, version, store.Term{Key: key})
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
