package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
)

// Sessions: one row written per renewal, however many terms.
//
// A term starts on its own record, as without sessions; the first renewal
// that lists it puts it on a session of its owner and TTL, a row of the
// session table (id, owner, expires_at, version, tag). While a
// record is on a session (its session column names it), the session's
// expiry is the record's, and the record's own expires_at holds a date a
// century ahead, so that a version of this package without sessions,
// which reads only that column, sees the term live and never takes it
// over.
//
// Every change to which terms are on a session moves its version up and
// draws it a new random tag: putting a term on (a renewal that lists a
// term acquired since), taking one off (a release, a revocation, an
// acquisition of the key by anyone, a renewal that drops one). The tag
// tells apart two changes that reached one version, as one a crash or a
// failover lost and one made after it do. The Store's sessionbook.Book
// knows the terms it put on and the versions its own changes produced; a
// renewal of exactly those terms at the version the Book knows writes the
// session row alone (renewFast). Anything else goes term by term
// (renewSlow), with the rules of a plain renewal (owner, epoch,
// unreleased, live), puts the listed terms on the session, and reads the
// session whole for the Book.
//
// Round trips, which a slow network makes the cost: a renewal takes at
// most three, whatever path it takes, as one did before sessions (one or
// two). So renewals are auto-committed statements, never a transaction
// (BEGIN and COMMIT are round trips of their own):
//
//   - the steady renewal: one UPDATE of the session row, at the version
//     and tag the Book knows, live, owner's, with no record of another
//     owner on it (alone);
//   - one that puts terms acquired since on the session, or writes runner
//     states: one multi-table UPDATE (joinSession, changeSession) that
//     does the steady renewal's check and write (moving the session to
//     the next version when terms go on) and, in the same statement,
//     writes the listed records: pending ones go on if still owner's, on
//     their own record, unreleased and live on their own expiry, judged
//     on the locked row, so that a takeover (which needs it expired) or a
//     revocation (which empties the owner) and the join exclude each
//     other. Then the steady UPDATE again at the version it left, which
//     stamps the expiry after every record lock the first one waited for
//     (a single statement computes the session's new value at its first
//     record), and only when the first one's row count says some terms
//     were not put on, a read of which were. If the first commits and
//     what follows fails or its answer is lost, the Book is told nothing:
//     the session is at a version it does not know (or, for runner
//     states alone, the Book still marks them unsure), and the next
//     renewal goes term by term, or writes them again;
//   - term by term: one UPDATE (renewTerms) that locks the session first,
//     then the listed records in key order, then a read of the session
//     whole (learnSession); when the Book knows no live session, an
//     INSERT of a new one first. A renewal whose session alone was found
//     changed is thus three round trips, and a term-by-term renewal
//     recovers whatever the Book got wrong, on a network that lets
//     through three. Its session's new expiry is computed at the first
//     record, before any wait for the others: earlier than it could be,
//     never later than the renewal began. Terms on the session that the
//     Book knows and the renewal does not list come off before it
//     (takeOffAnyway): one more round trip, in place of the read's
//     take-off, and when it fails the renewal fails before it extends
//     the session, so that a take-off that keeps failing never keeps a
//     term its holder gave up on alive. Terms the read finds on the
//     session that the Book did not know and the renewal did not renew
//     come off after the read (takeOff): one more round trip, and one
//     more again when the session changed between the read and the
//     take-off; that one failing does not fail the renewal, which has
//     committed: the Book learns them on the session first, so the next
//     renewal that leaves them out takes them off before it renews.
//
// A term comes off a session with the session's expiry as it stands
// under its lock, which is never less than an expiry a renewal promised
// it: two renewals of one owner may run at once (a Store's Renew calls
// are not serialised), and one that lists a term may renew it between
// another's renewal that leaves it out and that one's take-off. So a term
// a renewal leaves out lives up to a TTL past that renewal, not only to
// the expiry the session had before it (PostgreSQL's, whose renewal takes
// terms off in the same transaction): the expiry before is not known
// once the statement that renewed the session has set it, and no
// statement here reads a column it also sets (see Versions in
// session_queries.go).
//
// Locks are taken sessions first, then records in key order; each row is
// judged on the clock read once its locks are held. The steady renewal
// locks only the session (and the gap of the session index where a
// record of an empty owner on it would be, which alone probes, and which
// waits for no other lock); the statements that write records lock the
// session first, the join's constant row; a peer's takeover of a record
// on a session, a release and a revocation are each one auto-committed
// statement that locks the session of the records it writes (named by a
// plain read before), then the records, so none reads an expiry that a
// renewal is moving on, and none keeps a lock across round trips. No
// path takes a session after a record: a term-by-term renewal leaves a
// term on another live session of its owner (two Stores, one owner)
// where it is, answered lost (renewable). A deadlock all the same
// (InnoDB then rolls back one statement or transaction, which goes again
// or fails unconfirmed) cannot make a write unsafe: each statement or
// transaction commits whole or not at all. (A prune locks
// the floor row, a record, before the sessions it reads; no path that
// holds a session waits for the floor row.) A release or a revocation
// whose statement finds a record no longer on the session its read named
// (or, for a release, the session at another version) writes nothing
// there, and reads again.
//
// Shared fate is bounded: a term-by-term renewal moves off the session
// every term it does not renew, with the session's expiry as it stands,
// so a term its holder gave up on without a release ends on its own
// within a TTL. A session its Store cannot renew in time ends with every
// term on it; the Store opens another.

// slowRenewals counts the renewals that went term by term, for the tests
// that check when they do.
var slowRenewals atomic.Int64

// handle is the pool or the renewal lane's connection.
type handle interface {
	conn
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTx runs fn in a transaction, and commits it when fn says so (else it
// rolls it back). A transaction chosen as the victim of a deadlock has
// been rolled back whole, so it runs again, twice at most: fn must start
// from scratch each time.
func inTx(ctx context.Context, on handle, fn func(*sql.Tx) (bool, error)) (bool, error) {
	for attempt := 1; ; attempt++ {
		commit, err := runTx(ctx, on, fn)
		if err != nil && attempt < 3 && isServerError(err, errDeadlock) && ctx.Err() == nil {
			continue
		}
		return commit, err
	}
}

func runTx(ctx context.Context, on handle, fn func(*sql.Tx) (bool, error)) (bool, error) {
	tx, err := on.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	commit, err := fn(tx)
	if err != nil || !commit {
		_ = tx.Rollback()
		return false, err
	}
	return true, tx.Commit()
}

// newTag draws a session's tag (sessionbook): 52 random bits.
func newTag() int64 { return rand.Int64N(1 << 52) }

// session returns owner's live session for ttl as the Book knows it,
// opening one on on when it knows none.
func (s *Store) session(ctx context.Context, on conn, owner string, ttl time.Duration) (int64, error) {
	if id := s.book.Session(owner, ttl); id != 0 {
		return id, nil
	}
	s.opening.Lock()
	defer s.opening.Unlock()
	if id := s.book.Session(owner, ttl); id != 0 {
		return id, nil // opened meanwhile
	}
	tag := newTag()
	r, err := execOn(ctx, on, s.q.newSession, hexString(owner), ttl.Microseconds(), tag)
	var id int64
	if err == nil {
		id, err = r.LastInsertId()
	}
	if err != nil {
		return 0, fmt.Errorf("open a session: %w", err)
	}
	s.book.Opened(owner, ttl, id, sessionbook.Version{Tag: tag})
	return id, nil
}

// renew renews items of owner on on: the session alone (and the terms
// acquired since) when the Book knows it holds exactly the terms listed,
// else term by term. It returns the terms renewed, or nil when every one
// was.
func (s *Store) renew(ctx context.Context, on conn, owner string, ttl time.Duration, items []store.RenewItem) (map[store.Term]bool, error) {
	if f, ok := s.book.Check(owner, ttl, items); ok {
		renewed, done, err := s.renewFast(ctx, on, owner, ttl, f, items)
		if err != nil || done {
			return renewed, err
		}
	}
	slowRenewals.Add(1)
	batch := make([]batchItem, 0, len(items))
	for _, it := range items {
		batch = append(batch, batchItem{store.Term{Key: it.Key, Epoch: it.Epoch}, it.Running})
	}
	batch, _ = distinct(batch)
	return s.book.OnLiveSession(owner, ttl,
		func() (int64, error) { return s.session(ctx, on, owner, ttl) },
		func(id int64) (map[store.Term]bool, bool, error) { return s.renewSlow(ctx, on, owner, ttl, id, batch) })
}

// renewFast renews the session of f alone, and writes the runner states
// that changed and puts the terms acquired since on it in the same
// statement (and reads which it put on when its row count falls short);
// done false means the session was not at the version the Book knows (or
// dead, or held a term of another owner), or the terms to write fill more
// than one statement, and nothing was written. renewed is nil when every
// item was.
func (s *Store) renewFast(ctx context.Context, on conn, owner string, ttl time.Duration, f sessionbook.Fast, items []store.RenewItem) (renewed map[store.Term]bool, done bool, err error) {
	ownerHex := hexString(owner)
	ttlUS := ttl.Microseconds()
	if len(f.Changed) == 0 && len(f.Join) == 0 {
		// A row count of 0 with the session renewed would take a clock
		// that stood still between two renewals; the slow path would
		// then answer the same.
		r, err := execOn(ctx, on, s.q.renewSession, ttlUS, f.ID, ownerHex, f.Version.N, f.Version.Tag, f.ID)
		if n, err := affected(r, err); err != nil || n != 1 {
			return nil, false, err
		}
		s.book.Renewed(owner, ttl, f, f.Version, nil)
		return nil, true, nil
	}

	type row struct {
		it   store.RenewItem
		join bool
	}
	rows := make([]row, 0, len(f.Changed)+len(f.Join))
	for _, it := range f.Changed {
		rows = append(rows, row{it, false})
	}
	for _, it := range f.Join {
		rows = append(rows, row{it, true})
	}
	// In key order, the order the statement locks them in (Check names
	// each key once).
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.it.Key, b.it.Key) })
	cs := slices.Collect(docs(len(rows), func(b []byte, i int) []byte {
		b = appendKey(append(b, '['), rows[i].it.Key)
		b = append(strconv.AppendInt(append(b, ','), rows[i].it.Epoch, 10), ',')
		return append(appendBool(append(appendBool(b, rows[i].it.Running), ','), rows[i].join), ']')
	}))
	if len(cs) > 1 {
		return nil, false, nil // tens of thousands of terms at once: term by term
	}
	doc, rid := cs[0].doc, renewID()
	v := f.Version
	query, args := s.q.changeSession, []any{doc, ttlUS, rid}
	if len(f.Join) > 0 {
		v = sessionbook.Version{N: f.Version.N + 1, Tag: newTag(), Prev: f.Version.Tag}
		query, args = s.q.joinSession, []any{doc, ttlUS, v.N, v.Tag, rid}
	}
	args = append(args, f.ID, ownerHex, f.Version.N, f.Version.Tag, f.ID)
	r, err := execOn(ctx, on, query, args...)
	n, err := affected(r, err)
	if err != nil || n == 0 {
		return nil, false, err
	}
	// The statement computed the session's expiry at the first record,
	// before it waited for the others: stamp it again now that none is
	// held, at the version it left, or the term whose lock a peer held
	// would get less than its TTL. Nothing else writes to the session in
	// between but a change the Book hears of, after which the stamp the
	// statement made stands (it is after the renewal began).
	r, err = execOn(ctx, on, s.q.renewSession, ttlUS, f.ID, ownerHex, v.N, v.Tag, f.ID)
	if _, err := affected(r, err); err != nil {
		return nil, false, err
	}
	joined := make(map[store.Term]bool, len(f.Join))
	if n-1 == int64(len(rows)) { // every record written (the renew id is new): each joined
		for _, it := range f.Join {
			joined[store.Term{Key: it.Key, Epoch: it.Epoch}] = true
		}
	} else {
		err = queryOn(ctx, on, s.q.joined, []any{doc, rid, f.ID}, func(q *sql.Rows) error {
			var (
				t   store.Term
				key []byte
			)
			if err := q.Scan(&key, &t.Epoch); err != nil {
				return err
			}
			t.Key = string(key)
			for _, it := range f.Join {
				if it.Key == t.Key && it.Epoch == t.Epoch {
					joined[t] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, false, err
		}
	}
	s.book.Renewed(owner, ttl, f, v, joined)
	return f.Answers(items, joined), true, nil
}

// renewSlow renews batch (distinct, sorted) term by term onto session id
// (renewTerms, a statement per 1 MiB of JSON), reads the session whole for
// the Book (learnSession), and takes off it every term on it that the
// renewal did not renew (takeOff), if any; found false means the session
// was dead, gone or not owner's when read, and the terms renewed onto it,
// if any, are lost with it. A listed term found on the session, owner's
// and unreleased, was renewed by this call: renewTerms renews such a term
// (its epoch is the one listed), and one it could not renew no later
// renewal can (another renewal of owner at once may have renewed it since
// too).
func (s *Store) renewSlow(ctx context.Context, on conn, owner string, ttl time.Duration, id int64, batch []batchItem) (map[store.Term]bool, bool, error) {
	ownerHex := hexString(owner)
	listed := make(map[store.Term]bool, len(batch))
	for _, it := range batch {
		listed[it.term] = true
	}
	// Terms the Book knows on the session that this renewal leaves out
	// come off first, whatever the session's version: if that fails, the
	// renewal fails before it extends the session, so a term its holder
	// gave up on is never renewed because its take-off keeps failing.
	if stale := s.book.Unlisted(owner, ttl, id, listed); len(stale) > 0 {
		if err := s.takeOffAnyway(ctx, on, id, stale); err != nil {
			return nil, false, err
		}
	}
	rid := renewID()
	for c := range chunks(batch, true) {
		if _, err := execOn(ctx, on, s.q.renewTerms, c.doc, rid, ttl.Microseconds(), ttl.Microseconds(), newTag(), id, ownerHex); err != nil {
			return nil, false, err
		}
	}
	var (
		v     sessionbook.Version
		found bool
		terms []sessionbook.Term
		left  []store.Term // on the session, not renewed by this call
	)
	renewed := make(map[store.Term]bool, len(batch))
	err := queryOn(ctx, on, s.q.learnSession, []any{id, ownerHex}, func(rows *sql.Rows) error {
		var (
			key     []byte
			epoch   sql.NullInt64
			running sql.NullBool
			owners  sql.NullBool // owner's and unreleased
		)
		if err := rows.Scan(&v.N, &v.Tag, &key, &epoch, &running, &owners); err != nil {
			return err
		}
		found = true
		if epoch.Valid {
			t := store.Term{Key: string(key), Epoch: epoch.Int64}
			terms = append(terms, sessionbook.Term{Key: t.Key, Epoch: t.Epoch, Running: running.Bool})
			if listed[t] && owners.Bool {
				renewed[t] = true
			} else {
				left = append(left, t)
			}
		}
		return nil
	})
	if err != nil || !found {
		return nil, false, err
	}
	// The Book learns the session with the terms left out on it: if they
	// do not come off now, the next renewal that leaves them out goes term
	// by term at once, which then takes three round trips, not four.
	s.book.Learned(owner, ttl, id, v, terms)
	if len(left) > 0 {
		// The renewal has committed: a failure here costs the terms left
		// out no more than the renewal gave them. The Book knows them on
		// the session, so the next renewal that leaves them out takes
		// them off before it renews anything.
		_ = s.takeOff(ctx, on, id, v, left)
	}
	return renewed, true, nil
}

// takeOffAnyway takes terms off session id whatever its version
// (takeOffAnyway), with the session's expiry as it stands. The Book is
// not told the version it moves the session to: the renewal that follows
// learns the session afresh.
func (s *Store) takeOffAnyway(ctx context.Context, on conn, id int64, terms []store.Term) error {
	slices.SortFunc(terms, func(a, b store.Term) int { return strings.Compare(a.Key, b.Key) })
	for c := range docs(len(terms), func(b []byte, i int) []byte {
		b = appendKey(append(b, '['), terms[i].Key)
		return append(strconv.AppendInt(append(b, ','), terms[i].Epoch, 10), ']')
	}) {
		if _, err := execOn(ctx, on, s.q.takeOffAnyway, c.doc, newTag(), id); err != nil {
			return err
		}
	}
	return nil
}

// takeOff takes terms off session id, which learnSession read at v, with
// the session's expiry as it stands (takeOffAt). When the session moved
// from v since, that wrote nothing, and they come off all the same from
// whatever version it is at (takeOffAnyway): the Book, which is not told
// that version, then sends the next renewal term by term, which learns
// the session afresh.
func (s *Store) takeOff(ctx context.Context, on conn, id int64, v sessionbook.Version, terms []store.Term) error {
	slices.SortFunc(terms, func(a, b store.Term) int { return strings.Compare(a.Key, b.Key) })
	at := true // the session is at v, as far as this call knows
	for c := range docs(len(terms), func(b []byte, i int) []byte {
		b = appendKey(append(b, '['), terms[i].Key)
		return append(strconv.AppendInt(append(b, ','), terms[i].Epoch, 10), ']')
	}) {
		if at {
			next := sessionbook.Version{N: v.N + 1, Tag: newTag(), Prev: v.Tag}
			r, err := execOn(ctx, on, s.q.takeOffAt, c.doc, next.Tag, id, v.N, v.Tag)
			n, err := affected(r, err)
			if err != nil {
				return err
			}
			if n > 0 {
				s.book.Left(id, next, terms[c.lo:c.hi]...)
				v = next
				continue
			}
			at = false
		}
		if _, err := execOn(ctx, on, s.q.takeOffAnyway, c.doc, newTag(), id); err != nil {
			return err
		}
	}
	return nil
}
