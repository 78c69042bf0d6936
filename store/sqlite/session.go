package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
)

// Sessions: one write per renewal, however many terms.
//
// A term starts on its own record, as without sessions; the first renewal
// that lists it puts it on a session of its owner and TTL, a row of the
// session table with an expiry and a version. While a record is on a
// session, the session's expiry is the record's (the query fragment
// expiry), and the record's own expires_at holds a date a century ahead,
// which a version of this package without sessions reads as live. Every
// change to which terms are on a session moves its version up (and draws
// a new random tag, which tells apart two changes that reached one
// version, one of them lost to a crash) in the same transaction: a renewal that puts terms on or takes them off, a release,
// a revocation, an acquisition of a key whose record is on one.
//
// The Store's sessionbook.Book knows the terms on its sessions and the
// version they are known at. A renewal that lists exactly those (and terms
// acquired since, which it puts on) writes the session row alone, if it
// finds the session at that version: one small UPDATE under the write lock
// every process on the file waits for, instead of a write per record. Any
// other renewal goes term by term: it renews each listed term as before
// (owner, epoch, unreleased, live), puts it on the session, and takes off
// every term it does not list, with the session's expiry of then, so a
// term its holder gave up on without a release ends on its own rather than
// living as long as the session. Acquisitions never extend a session.
//
// A session its Store cannot renew in time dies with every term on it:
// peers see each record expire at the session's expiry and wait out the
// grace as after a crash; the Store's next renewal reports them lost and
// opens a new session.

// slowRenewals counts the renewals that went term by term, for the tests
// that check when they do.
var slowRenewals atomic.Int64

// sessionTable is the quoted name of table's session table. No validated
// table name has a ':', so it never meets another Store's lease table.
func sessionTable(table string) string { return `"` + table + `:sessions"` }

// renewTerms renews owner's terms in items in one transaction under the
// gate, and returns the terms renewed: nil when every one was.
func (s *Store) renewTerms(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) (map[store.Term]bool, error) {
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	id, err := s.liveSession(ctx, tx, owner, ttl, false)
	if err != nil {
		return nil, err
	}
	if f, ok := s.book.Check(owner, ttl, items); ok && f.ID == id {
		renewed, done, err := s.renewFast(ctx, tx, owner, ttl, f, items)
		if err != nil || done {
			return renewed, err
		}
	}
	slowRenewals.Add(1)
	if id, err = s.liveSession(ctx, tx, owner, ttl, true); err != nil {
		return nil, err
	}
	return s.renewSlow(ctx, tx, owner, ttl, id, dedupe(items))
}

// liveSession returns owner's session for ttl, opening one in tx when the
// Book knows none, or (check) when the one it knows is dead or gone.
func (s *Store) liveSession(ctx context.Context, tx *sql.Tx, owner string, ttl time.Duration, check bool) (int64, error) {
	id := s.book.Session(owner, ttl)
	if id != 0 && check {
		var live bool
		err := tx.QueryRowContext(ctx, s.q.sessionLive, id, owner).Scan(&live)
		switch {
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return 0, err
		case err != nil || !live:
			s.book.Dead(owner, ttl, id)
			id = 0
		}
	}
	if id != 0 {
		return id, nil
	}
	// Should tx roll back, the Book knows a session that does not exist:
	// the next renewal finds it gone and opens another. One that did
	// commit and goes unused is pruned in time.
	var v sessionbook.Version
	if err := tx.QueryRowContext(ctx, s.q.newSession, owner, ttl.Microseconds()).Scan(&id, &v.N, &v.Tag); err != nil {
		return 0, err
	}
	s.book.Opened(owner, ttl, id, v)
	return id, nil
}

// renewFast renews the session of f alone, with the terms to put on it;
// done false means it was not at the version the Book knows (or was dead),
// and nothing was written. renewed is nil when every item was.
func (s *Store) renewFast(ctx context.Context, tx *sql.Tx, owner string, ttl time.Duration, f sessionbook.Fast, items []store.RenewItem) (renewed map[store.Term]bool, done bool, err error) {
	joining := 0
	if len(f.Join) > 0 {
		joining = 1
	}
	var version sessionbook.Version
	err = tx.QueryRowContext(ctx, s.q.renewSession, f.ID, owner, ttl.Microseconds(), f.Version.N, joining, f.Version.Tag).Scan(&version.N, &version.Tag)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if len(f.Changed) > 0 {
		arg, err := json.Marshal(dedupe(f.Changed))
		if err != nil {
			return nil, false, err
		}
		if _, err := tx.ExecContext(ctx, s.q.setRunning, f.ID, string(arg)); err != nil {
			return nil, false, err
		}
	}
	joined := map[store.Term]bool{}
	if len(f.Join) > 0 {
		arg, err := json.Marshal(dedupe(f.Join))
		if err != nil {
			return nil, false, err
		}
		if err := scanTerms(tx.QueryContext(ctx, s.q.joinSession, owner, f.ID, string(arg)))(func(t store.Term) { joined[t] = true }); err != nil {
			return nil, false, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	s.book.Renewed(owner, ttl, f, version, joined)
	return f.Answers(items, joined), true, nil
}

// renewSlow renews rows, the deduplicated [key, epoch, running] triples of
// owner, term by term onto session id, which is live, and takes every
// other term off it.
func (s *Store) renewSlow(ctx context.Context, tx *sql.Tx, owner string, ttl time.Duration, id int64, rows [][3]any) (map[store.Term]bool, error) {
	arg, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.detachAll, id); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.bumpSessionsOf, owner, id, string(arg)); err != nil {
		return nil, err
	}
	renewed := make(map[store.Term]bool, len(rows))
	var terms []sessionbook.Term
	err = scanRows(tx.QueryContext(ctx, s.q.renewTerms, owner, id, string(arg)))(func(q *sql.Rows) error {
		var t sessionbook.Term
		if err := q.Scan(&t.Key, &t.Epoch, &t.Running); err != nil {
			return err
		}
		terms = append(terms, t)
		renewed[store.Term{Key: t.Key, Epoch: t.Epoch}] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	var version sessionbook.Version
	if err := tx.QueryRowContext(ctx, s.q.extendSession, id, ttl.Microseconds()).Scan(&version.N, &version.Tag); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.book.Learned(owner, ttl, id, version, terms)
	return renewed, nil
}

// scanTerms hands each (key, epoch) row of a query's result to fn.
func scanTerms(rows *sql.Rows, err error) func(fn func(store.Term)) error {
	return func(fn func(store.Term)) error {
		return scanRows(rows, err)(func(rows *sql.Rows) error {
			var t store.Term
			if err := rows.Scan(&t.Key, &t.Epoch); err != nil {
				return err
			}
			fn(t)
			return nil
		})
	}
}

// scanRows hands each row of a query's result to scan.
func scanRows(rows *sql.Rows, err error) func(scan func(*sql.Rows) error) error {
	return func(scan func(*sql.Rows) error) error {
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
}
