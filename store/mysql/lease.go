package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
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
	key, owner := hexString(req.Key), hexString(req.Owner)
	ttl, grace := req.TTL.Microseconds(), req.Grace.Microseconds()
	r, err := s.exec(ctx, s.q.takeOver, owner, ttl, req.Running, key, owner, grace)
	if err != nil {
		return store.AcquireResult{}, err
	}
	switch n, err := r.RowsAffected(); {
	case err != nil:
		return store.AcquireResult{}, err
	case n == 1:
		epoch, err := r.LastInsertId()
		if err != nil {
			return store.AcquireResult{}, err
		}
		return store.AcquireResult{Acquired: true, Epoch: epoch}, nil
	}

	h, found, err := s.readHolder(ctx, req.Key)
	if err != nil || found {
		return store.AcquireResult{Holder: h}, err
	}
	if err := s.ensureFloor(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	r, err = s.exec(ctx, s.q.insert, key, owner, ttl, req.Running)
	if err != nil {
		return store.AcquireResult{}, err
	}
	n, err := r.RowsAffected()
	switch {
	case err != nil:
		return store.AcquireResult{}, err
	case n == 1:
		epoch, err := r.LastInsertId()
		if err != nil {
			return store.AcquireResult{}, err
		}
		return store.AcquireResult{Acquired: true, Epoch: epoch}, nil
	}
	// A peer inserted the key between the read and the insert.
	h, found, err = s.readHolder(ctx, req.Key)
	if err == nil && !found {
		err = errors.New("the key's record vanished: was it deleted by hand?")
	}
	return store.AcquireResult{Holder: h}, err
}

func (s *Store) readHolder(ctx context.Context, key string) (store.Lease, bool, error) {
	h := store.Lease{Key: key}
	var left int64
	err := s.db.QueryRowContext(ctx, s.q.holder, hexString(key)).Scan(&h.Owner, &h.Epoch, &h.Released, &h.Running, &left)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Lease{}, false, nil
	case err != nil:
		return store.Lease{}, false, fmt.Errorf("read holder: %w", err)
	}
	fill(&h, left)
	return h, true, nil
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

// Renew extends every listed term of owner: one statement for the whole
// batch when every term is renewed, and one more read when some are lost,
// to learn which. Items naming the same term twice get the same answer;
// the runner state of the last one is recorded.
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
	batch := make([]batchItem, 0, len(items))
	for _, it := range items {
		batch = append(batch, batchItem{store.Term{Key: it.Key, Epoch: it.Epoch}, it.Running})
	}
	batch, index := distinct(batch)
	renewed, err := s.renew(ctx, owner, ttl, batch, index)
	if err == nil {
		err = ctx.Err() // a renewal confirmed too late protects nothing
	}
	if err != nil {
		return nil, fmt.Errorf("mysql: renew %d leases: %w", len(items), err)
	}
	for i, it := range items {
		out[i] = renewed[index[store.Term{Key: it.Key, Epoch: it.Epoch}]]
	}
	return out, nil
}

func (s *Store) renew(ctx context.Context, owner string, ttl time.Duration, batch []batchItem, index map[store.Term]int) (renewed []bool, err error) {
	var on conn = s.db
	if c := s.lane.take(s.db); c != nil {
		on = c
		defer func() { s.lane.put(s.db, c, err) }()
	}
	renewed = make([]bool, len(batch))
	// The id marks the rows this call renews. Two calls drawing the same
	// one (odds 2⁻⁶³) could only credit each other's renewals of the
	// same owner's terms.
	id := rand.Int64N(1<<63-1) + 1
	ownerHex := hexString(owner)
	for c := range chunks(batch, true) {
		r, err := execOn(ctx, on, s.q.renew, c.doc, ttl.Microseconds(), id, ownerHex)
		if err != nil {
			return nil, err
		}
		// Every row the statement matched changed (the id is new), so the
		// count means the same with or without clientFoundRows. Each row
		// is one key, so a count equal to the number of distinct terms
		// means every one was renewed.
		n, err := r.RowsAffected()
		if err != nil {
			return nil, err
		}
		switch {
		case n == int64(c.hi-c.lo):
			for i := c.lo; i < c.hi; i++ {
				renewed[i] = true
			}
			continue
		case n == 0:
			continue
		}
		err = queryOn(ctx, on, s.q.renewed, []any{c.doc, id}, func(rows *sql.Rows) error {
			var t store.Term
			if err := rows.Scan(&t.Key, &t.Epoch); err != nil {
				return err
			}
			if i, ok := index[t]; ok {
				renewed[i] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return renewed, nil
}

// Release ends every listed term of owner now, in one statement. Terms that
// are not owner's current term are left untouched.
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
		if _, err := s.exec(ctx, s.q.release, c.doc, ownerHex); err != nil {
			return fmt.Errorf("mysql: release %d leases: %w", len(terms), err)
		}
	}
	return nil
}

// List returns every lease whose key starts with prefix, sorted by key,
// with one clock reading for all of them.
func (s *Store) List(ctx context.Context, prefix string) (_ []store.Lease, err error) {
	defer func() { err = denied(err) }()
	if err := s.access.Read(ctx); err != nil {
		return nil, err
	}
	query, args := s.q.listAll, []any{hexString(prefix)}
	if end, ok := sqlstore.PrefixEnd(prefix); ok {
		query, args = s.q.list, append(args, hexString(end))
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
	r, err := s.exec(ctx, s.q.revoke, hexString(key))
	var n int64
	if err == nil {
		n, err = r.RowsAffected()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("mysql: revoke %q: %w", key, err)
	}
	return n == 1, nil
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

// chunk is batch[lo:hi] as the JSON document of one statement.
type chunk struct {
	lo, hi int
	doc    string
}

// chunks splits batch into documents of at most maxBatchBytes (one item at
// least), with ["hex key", epoch, running] per item.
func chunks(batch []batchItem, withRunning bool) func(yield func(chunk) bool) {
	return func(yield func(chunk) bool) {
		buf := make([]byte, 0, min(maxBatchBytes, 64+len(batch)*48))
		var item []byte
		lo := 0
		for i, it := range batch {
			item = append(item[:0], `["`...)
			item = hex.AppendEncode(item, []byte(it.term.Key))
			item = append(item, `",`...)
			item = strconv.AppendInt(item, it.term.Epoch, 10)
			if withRunning {
				item = append(item, ',', '0')
				if it.running {
					item[len(item)-1] = '1'
				}
			}
			item = append(item, ']')
			if i > lo && len(buf)+1+len(item)+1 > maxBatchBytes {
				if !yield(chunk{lo, i, string(append(buf, ']'))}) {
					return
				}
				buf, lo = buf[:0], i
			}
			if i == lo {
				buf = append(buf, '[')
			} else {
				buf = append(buf, ',')
			}
			buf = append(buf, item...)
		}
		if lo < len(batch) {
			yield(chunk{lo, len(batch), string(append(buf, ']'))})
		}
	}
}

func hexString(s string) string { return hex.EncodeToString([]byte(s)) }
