package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

// maxBatchBytes bounds the JSON document of one batched statement. Batches
// that would exceed it are sent as several statements, so no renewal fails
// on the server's max_allowed_packet (1 MiB is far below every default and
// still holds tens of thousands of keys). A variable for the tests.
var maxBatchBytes = 1 << 20

// Acquire starts a new term of req.Key for req.Owner when the key is free,
// or reports the lease that blocks it. A takeover of an existing record is
// one statement; a refusal adds a read of the holder; a key never seen
// before adds an insert.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (_ store.AcquireResult, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, err
	}
	if err := s.access.Write(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	res, err := sqlstore.Acquire(ctx, req, s.acquireOnce)
	if err != nil {
		return store.AcquireResult{}, fmt.Errorf("mysql: acquire %q: %w", req.Key, err)
	}
	return res, nil
}

func (s *Store) acquireOnce(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	// The term starts on its own record; the owner's session is opened
	// now, once, so that the renewal that puts the term on it needs no
	// more than a renewal did before sessions.
	if _, err := s.session(ctx, s.db, req.Owner, req.TTL); err != nil {
		return store.AcquireResult{}, err
	}
	key, owner := hexString(req.Key), hexString(req.Owner)
	ttl := req.TTL.Microseconds()
	if res, err := s.takeOver(ctx, req); err != nil || res.Acquired {
		return res, err
	}

	h, on, found, err := s.readHolder(ctx, req.Key)
	if err == nil && found && on != 0 && (h.Released || h.Owner == req.Owner || -h.TimeLeft >= req.Grace) {
		// The record is on a session that looks over: only a takeover
		// that holds the session's lock may read its expiry.
		var res store.AcquireResult
		if res, err = s.takeOverSession(ctx, req, on); err != nil || res.Acquired {
			return res, err
		}
		h, _, found, err = s.readHolder(ctx, req.Key)
	}
	if err != nil || found {
		return store.AcquireResult{Holder: h}, err
	}
	if err := s.ensureFloor(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	r, err := s.exec(ctx, s.q.insert, key, owner, ttl, req.Running)
	if n, err := affected(r, err); err != nil || n == 1 {
		var epoch int64
		if err == nil {
			epoch, err = r.LastInsertId()
		}
		return s.acquired(req, epoch, err)
	}
	// A peer inserted the key between the read and the insert.
	h, _, found, err = s.readHolder(ctx, req.Key)
	if err == nil && !found {
		err = errors.New("the key's record vanished: was it deleted by hand?")
	}
	return store.AcquireResult{Holder: h}, err
}

// acquired records and answers a grant of req with epoch.
func (s *Store) acquired(req store.AcquireRequest, epoch int64, err error) (store.AcquireResult, error) {
	if err != nil {
		return store.AcquireResult{}, err
	}
	s.book.Acquired(req.Owner, req.TTL, req.Key, epoch, req.Running)
	return store.AcquireResult{Acquired: true, Epoch: epoch}, nil
}

// takeOver takes req.Key over from a record on no session, in one
// auto-committed statement, whose OK packet carries the new epoch.
func (s *Store) takeOver(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	owner := hexString(req.Owner)
	r, err := s.exec(ctx, s.q.takeOver, owner, req.TTL.Microseconds(), req.Running, hexString(req.Key), owner, req.Grace.Microseconds())
	if n, err := affected(r, err); err != nil || n != 1 {
		return store.AcquireResult{}, err
	}
	epoch, err := r.LastInsertId()
	return s.acquired(req, epoch, err)
}

// takeOverSession takes req.Key over from a record on session id (as a
// plain read found it): one auto-committed statement that locks the
// session first, judges its expiry under that lock, then the record,
// which must still be on it; its OK packet carries the new epoch. The
// session moves to a version this Store's Book is not told of, so a Book
// that knew the term on it sends its next renewal term by term. Not
// acquired, with no error, when the term is not over or the record moved.
func (s *Store) takeOverSession(ctx context.Context, req store.AcquireRequest, id int64) (store.AcquireResult, error) {
	owner := hexString(req.Owner)
	r, err := s.exec(ctx, s.q.takeOverSession, hexString(req.Key), owner, req.TTL.Microseconds(), req.Running, newTag(),
		id, owner, req.Grace.Microseconds())
	if n, err := affected(r, err); err != nil || n == 0 {
		return store.AcquireResult{}, err
	}
	epoch, err := r.LastInsertId()
	return s.acquired(req, epoch, err)
}

// ignoreNoRows turns "no row" into no error.
func ignoreNoRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// readHolder reads key's lease and the session its record is on.
func (s *Store) readHolder(ctx context.Context, key string) (store.Lease, int64, bool, error) {
	h := store.Lease{Key: key}
	var left, on int64
	err := s.db.QueryRowContext(ctx, s.q.holder, hexString(key)).Scan(&h.Owner, &h.Epoch, &h.Released, &h.Running, &left, &on)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Lease{}, 0, false, nil
	case err != nil:
		return store.Lease{}, 0, false, fmt.Errorf("read holder: %w", err)
	}
	fill(&h, left)
	return h, on, true, nil
}

// fill derives the liveness of l from its time left (µs, store clock).
func fill(l *store.Lease, leftUS int64) {
	l.TimeLeft = time.Duration(leftUS) * time.Microsecond
	l.Live = !l.Released && l.Owner != "" && leftUS > 0
}

// batchItem is one distinct term of a batch.
type batchItem struct {
	term    store.Term
	running bool
}

// Renew extends every listed term of owner: when they are the terms on
// the owner's session, one statement that writes the session row alone
// (session.go). Items naming the same term twice get the same answer; the
// runner state of the last one is recorded.
func (s *Store) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) (_ []bool, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateRenew(owner, ttl, items); err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	if len(items) == 0 {
		return out, nil
	}
	if err := s.access.Write(ctx); err != nil {
		return nil, err
	}
	var on handle = s.db
	if c := s.lane.take(s.db); c != nil {
		on = c
		defer func() { s.lane.put(s.db, c, err) }()
	}
	renewed, err := s.renew(ctx, on, owner, ttl, items)
	if err == nil {
		err = ctx.Err() // a renewal confirmed too late protects nothing
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: renew %d leases: %w", len(items), err)
	}
	for i, it := range items {
		out[i] = renewed == nil || renewed[store.Term{Key: it.Key, Epoch: it.Epoch}]
	}
	return out, nil
}

// List returns every lease whose key starts with prefix, sorted by key,
// with one clock reading for all of them.
func (s *Store) List(ctx context.Context, prefix string) (_ []store.Lease, err error) {
	defer func() { err = denied(err) }()
	if err := s.access.Read(ctx); err != nil {
		return nil, err
	}
	list, listAll, err := s.listSQL(ctx)
	if err != nil {
		return nil, fmt.Errorf("mysql: list %q: %w", prefix, err)
	}
	query, args := listAll, []any{hexString(prefix)}
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		query, args = list, append(args, hexString(end))
	}
	var out []store.Lease
	err = s.query(ctx, query, args, func(rows *sql.Rows) error {
		var (
			l    store.Lease
			left int64
		)
		if err := rows.Scan(&l.Key, &l.Owner, &l.Epoch, &l.Released, &l.Running, &left); err != nil {
			return err
		}
		fill(&l, left)
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mysql: list %q: %w", prefix, err)
	}
	return out, nil
}

// exec runs one auto-committed statement. A statement chosen as the victim
// of a deadlock has been rolled back whole, so it is safe to run again.
// conn is the pool or one connection of it (the renewal lane).
type conn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return execOn(ctx, s.db, query, args...)
}

func execOn(ctx context.Context, on conn, query string, args ...any) (sql.Result, error) {
	for attempt := 1; ; attempt++ {
		r, err := on.ExecContext(ctx, query, args...)
		if err != nil && attempt < 3 && isServerError(err, errDeadlock) && ctx.Err() == nil {
			continue
		}
		return r, err
	}
}

// query runs a SELECT and calls each for every row.
func (s *Store) query(ctx context.Context, query string, args []any, each func(*sql.Rows) error) error {
	return queryOn(ctx, s.db, query, args, each)
}

func queryOn(ctx context.Context, on conn, query string, args []any, each func(*sql.Rows) error) error {
	rows, err := on.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// distinct drops repeated terms (the last running state wins) and sorts
// the rest by key, the order in which the statements lock rows. index maps
// each term to its position.
func distinct(batch []batchItem) ([]batchItem, map[store.Term]int) {
	index := make(map[store.Term]int, len(batch))
	out := batch[:0]
	for _, it := range batch {
		if i, ok := index[it.term]; ok {
			out[i].running = it.running
			continue
		}
		index[it.term] = len(out)
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b batchItem) int {
		return cmp.Or(strings.Compare(a.term.Key, b.term.Key), cmp.Compare(a.term.Epoch, b.term.Epoch))
	})
	for i, it := range out {
		index[it.term] = i
	}
	return out, index
}

func hexString(s string) string { return hex.EncodeToString([]byte(s)) }
