package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
)

// moveTries bounds how often a release or a revocation starts again
// because what its plain read found changed before its write: a record
// moved onto a session (only a renewal that puts the term on its session
// moves it, once), or, for a release, the session moved to another
// version.
const moveTries = 3

// Release ends every listed term of owner now, a few statements per batch
// of at most 1 MiB of JSON. Terms that are not owner's current term are
// left untouched.
func (s *Store) Release(ctx context.Context, owner string, terms []store.Term) (err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateRelease(owner, terms); err != nil {
		return err
	}
	if len(terms) == 0 {
		return nil
	}
	if err := s.access.Write(ctx); err != nil {
		return err
	}
	batch := make([]batchItem, 0, len(terms))
	for _, t := range terms {
		batch = append(batch, batchItem{term: t})
	}
	batch, _ = distinct(batch)
	ownerHex := hexString(owner)
	for c := range chunks(batch, false) {
		if err := s.release(ctx, c.doc, ownerHex); err != nil {
			return fmt.Errorf("mysql: release %d leases: %w", len(terms), err)
		}
	}
	return nil
}

// releasing is a term a release ends, as its plain read found it.
type releasing struct {
	term    store.Term
	session int64
	version sessionbook.Version // the session's, when on one
}

// release ends the terms of doc that are owner's and unreleased with
// auto-committed statements, no transaction: a plain read of the terms
// and the sessions they are on (termsOf), then one statement for those on
// their own records (release) and one per session for those on it
// (releaseSession), which locks the session first and moves it one
// version, whatever the number of its terms. A statement that writes
// fewer terms than the read found (one moved onto a session, or its
// session moved to another version, meanwhile) sends the release round
// again from the read; the last round takes a session at any version.
// A term on a session usually takes two round trips; on its own record,
// two as well.
func (s *Store) release(ctx context.Context, doc, ownerHex string) error {
	for try := 1; ; try++ {
		var found []releasing
		err := queryOn(ctx, s.db, s.q.termsOf, []any{doc, ownerHex}, func(rows *sql.Rows) error {
			var (
				r   releasing
				key []byte
			)
			if err := rows.Scan(&key, &r.term.Epoch, &r.session, &r.version.N, &r.version.Tag); err != nil {
				return err
			}
			r.term.Key = string(key)
			found = append(found, r)
			return nil
		})
		switch {
		case err != nil:
			return err
		case len(found) == 0:
			return nil
		case try > moveTries:
			return fmt.Errorf("terms moved onto a session or their session changed %d times as they were released", moveTries)
		}
		// By session, each group in key order (the order of the read).
		groups := map[int64][]releasing{}
		var order []int64
		for _, r := range found {
			if _, ok := groups[r.session]; !ok {
				order = append(order, r.session)
			}
			groups[r.session] = append(groups[r.session], r)
		}
		short := false
		for _, id := range order {
			g := groups[id]
			terms := make([]store.Term, len(g))
			for i, r := range g {
				terms[i] = r.term
			}
			gdoc := termsDoc(terms)
			if id == 0 {
				r, err := s.exec(ctx, s.q.release, gdoc, ownerHex)
				n, err := affected(r, err)
				if err != nil {
					return err
				}
				short = short || n < int64(len(g))
				s.book.Left(0, sessionbook.Version{}, terms...)
				continue
			}
			anyVersion := try == moveTries
			at := g[0].version
			next := sessionbook.Version{N: at.N + 1, Tag: newTag(), Prev: at.Tag}
			r, err := s.exec(ctx, s.q.releaseSession, gdoc, next.Tag, id, anyVersion, at.N, at.Tag, ownerHex)
			n, err := affected(r, err)
			if err != nil {
				return err
			}
			if n == 0 {
				short = true
				continue
			}
			// Every listed term not on the session now: released, or
			// off it already. The Book hears of the version only when the
			// statement fixed the one it moved from.
			if !anyVersion {
				s.book.Left(id, next, terms...)
			}
			short = short || n-1 < int64(len(g))
		}
		if !short {
			return nil
		}
	}
}

// termsDoc is a JSON array of ["hex key", epoch] of terms, in their order.
func termsDoc(terms []store.Term) string {
	b := []byte{'['}
	for i, t := range terms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKey(append(b, '['), t.Key)
		b = append(strconv.AppendInt(append(b, ','), t.Epoch, 10), ']')
	}
	return string(append(b, ']'))
}

// Revoke fences the current term of key: it moves the key to a new epoch
// owned by nobody and keeps the expiry, so peers wait for expiry + grace.
// It reports false when the key has no live term.
func (s *Store) Revoke(ctx context.Context, key string) (_ bool, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := s.access.Write(ctx); err != nil {
		return false, err
	}
	revoked, err := s.revoke(ctx, key)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("mysql: revoke %q: %w", key, err)
	}
	return revoked, nil
}

// revoke revokes key's live term with auto-committed statements, no
// transaction: a plain read of the session its record is on, then one
// UPDATE, of the record alone when on none (revoke), else one that locks
// the session first, then the record, which must still be on it
// (revokeSession). When that writes nothing, the read goes again: the
// term ended, or its record moved onto a session or off one meanwhile.
// The session a term leaves moves to a version the Book is not told of
// (see revokeSession).
func (s *Store) revoke(ctx context.Context, key string) (bool, error) {
	k := hexString(key)
	last := int64(-1)
	for try := 1; ; try++ {
		var id int64
		if err := s.db.QueryRowContext(ctx, s.q.sessionOf, k).Scan(&id); err != nil {
			return false, ignoreNoRows(err) // no record: nothing to revoke
		}
		switch {
		case id == last:
			return false, nil // where it was, and not revoked: no live term
		case try > moveTries:
			return false, fmt.Errorf("its record moved onto a session or off one %d times as it was revoked", moveTries)
		}
		last = id
		var (
			r   sql.Result
			err error
		)
		if id == 0 {
			r, err = s.exec(ctx, s.q.revoke, k)
		} else {
			r, err = s.exec(ctx, s.q.revokeSession, k, newTag(), id)
		}
		n, err := affected(r, err)
		if err != nil {
			return false, err
		}
		if n > 0 {
			s.book.Left(0, sessionbook.Version{}, store.Term{Key: key}) // no longer pending, if it was
			return true, nil
		}
	}
}
