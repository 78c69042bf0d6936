package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Sessions: one write per renewal, however many terms.
//
// Each term a Store acquires goes onto a session of its owner and TTL, a
// row of the session table with an expiry of its own; while a record is on
// a session, the session's expiry is the record's (the query fragment
// expiry). A renewal that finds every term it lists on its session, and
// nothing else there, extends the session alone: one small UPDATE, where
// renewing each record costs a write per term under the write lock that
// every process on the file waits for.
//
// The Store knows which terms are on its sessions, for it puts every one
// there (acquisitions and renewals, each under the file's write gate, its
// knowledge updated once the transaction has committed). Others only take
// terms off: a revocation, a release or a renewal by another Store of the
// same owner, a takeover once the session is dead. Each of those counts
// the term off the session, so a session whose count is not the number of
// terms its Store knows has changed behind its back, and the renewal then
// takes the slow path: it renews each listed term as before (owner, epoch,
// unreleased, live), puts it on the session, and learns the session's
// terms afresh. A call whose outcome the Store cannot know (an error) makes
// the next renewal take the slow path too.
//
// Shared fate has a bound: a term no renewal lists (its holder gave up on
// it without a release) would live as long as the session. The slow path,
// which any such renewal takes, moves off the session every term put on it
// before the session's previous renewal, with the session's expiry of
// then, and puts back those it lists: an unwanted term then ends on its
// own, no earlier than any deadline its holder was told of.
//
// A session the Store cannot renew in time dies with every term on it:
// peers see each record expire at the session's expiry and wait out the
// grace as after a crash; the Store's next renewal reports them lost and
// opens a new session.

// slowRenewals counts the renewals that took the slow path, for the tests
// that check when it is taken.
var slowRenewals atomic.Int64

// sessionTable is the quoted name of table's session table. No validated
// table name has a ':', so it never meets another Store's lease table.
func sessionTable(table string) string { return `"` + table + `:sessions"` }

// sessionKey names one of a Store's sessions: an owner's terms with one TTL.
type sessionKey struct {
	owner string
	ttl   time.Duration
}

// session is what a Store knows of one of its sessions. It is read and
// changed only under the file's write gate.
type session struct {
	id int64 // 0: none yet
	// terms are the terms on the session by key, with the runner state
	// last written, when synced; otherwise the renewal takes the slow path.
	terms  map[string]*sessionTerm
	synced bool
	// pass numbers the renewals that check terms, to find an item that
	// names a term twice.
	pass uint64
	// renewals counts the session's renewals by this Store.
	renewals uint64
}

type sessionTerm struct {
	epoch   int64
	running bool
	pass    uint64 // the last check that found it
	// since is the session's renewals when the term was put on it: a term
	// put on since the last renewal may be missing from a renewal's list,
	// whose holder may not have heard of it yet.
	since uint64
}

// sessionFor returns the Store's session for owner and ttl, made empty if
// it has none. Call under the gate.
func (s *Store) sessionFor(owner string, ttl time.Duration) *session {
	k := sessionKey{owner, ttl}
	ss := s.sessions[k]
	if ss == nil {
		if s.sessions == nil {
			s.sessions = make(map[sessionKey]*session)
		}
		ss = &session{terms: map[string]*sessionTerm{}, synced: true}
		s.sessions[k] = ss
	}
	return ss
}

// unsync makes every session of owner take the slow path at its next
// renewal: a call of owner's had an outcome the Store cannot know. Call
// under the gate.
func (s *Store) unsync(owner string) {
	for k, ss := range s.sessions {
		if k.owner == owner {
			ss.synced = false
		}
	}
}

// forget takes a term off what the Store knows of the session with id
// (any of owner's, when id is 0), after it left it. Call under the gate.
func (s *Store) forget(owner string, id int64, t store.Term) {
	for k, ss := range s.sessions {
		if on := ss.terms[t.Key]; on != nil && on.epoch == t.Epoch && (id == 0 && k.owner == owner || id != 0 && ss.id == id) {
			delete(ss.terms, t.Key)
		}
	}
}

// openSession returns the id of a live session for owner and ttl in tx:
// ss's own while it lives, else a new one (fresh true).
func (s *Store) openSession(ctx context.Context, tx *sql.Tx, ss *session, owner string, ttl time.Duration) (id int64, fresh bool, err error) {
	if ss.id != 0 {
		var live bool
		err := tx.QueryRowContext(ctx, s.q.sessionLive, ss.id, owner).Scan(&live)
		switch {
		case err == nil && live:
			return ss.id, false, nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return 0, false, err
		}
	}
	err = tx.QueryRowContext(ctx, s.q.newSession, owner, ttl.Microseconds()).Scan(&id)
	return id, true, err
}

// attach puts the term of key just acquired in tx onto a live session of
// owner and ttl, and counts it off the session its last term was on (old).
// It returns what to record once tx commits.
func (s *Store) attach(ctx context.Context, tx *sql.Tx, key string, old int64, owner string, ttl time.Duration) (apply func(epoch int64, running bool), err error) {
	ss := s.sessionFor(owner, ttl)
	id, fresh, err := s.openSession(ctx, tx, ss, owner, ttl)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.attach, key, id); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.joinSession, id, ttl.Microseconds()); err != nil {
		return nil, err
	}
	if old != 0 {
		if _, err := tx.ExecContext(ctx, s.q.leaveSession, old); err != nil {
			return nil, err
		}
	}
	return func(epoch int64, running bool) {
		if old != 0 {
			for _, o := range s.sessions {
				if o.id == old {
					delete(o.terms, key)
				}
			}
		}
		if fresh {
			ss.id, ss.terms, ss.synced = id, map[string]*sessionTerm{}, true
		}
		ss.terms[key] = &sessionTerm{epoch: epoch, running: running, since: ss.renewals}
	}, nil
}

// renewTerms renews owner's terms in items in one transaction under the
// gate, and returns the terms renewed: nil when every one was.
func (s *Store) renewTerms(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) (map[store.Term]bool, error) {
	if err := s.gate.enter(ctx); err != nil {
		return nil, err
	}
	defer s.gate.leave()
	ss := s.sessionFor(owner, ttl)
	renewed, err := s.renewIn(ctx, ss, owner, ttl, items)
	if err != nil {
		ss.synced = false
	}
	return renewed, err
}

func (s *Store) renewIn(ctx context.Context, ss *session, owner string, ttl time.Duration, items []store.RenewItem) (map[store.Term]bool, error) {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE, see acquire
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if changed, exact := ss.knowsExactly(items); exact {
		ok, err := s.renewSession(ctx, tx, ss, owner, ttl, changed)
		if err != nil || ok {
			return nil, err
		}
	}
	slowRenewals.Add(1)
	rows := dedupe(items)
	id, _, err := s.openSession(ctx, tx, ss, owner, ttl)
	if err != nil {
		return nil, err
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.leaveSessions, owner, id, string(arg)); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.detachOld, id); err != nil {
		return nil, err
	}
	renewed := make(map[store.Term]bool, len(rows))
	if err := scanTerms(tx.QueryContext(ctx, s.q.renewTerms, owner, id, string(arg)))(func(t store.Term) { renewed[t] = true }); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q.recount, id, ttl.Microseconds()); err != nil {
		return nil, err
	}
	terms, err := s.sessionTerms(ctx, tx, id, ss.renewals)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	ss.id, ss.terms, ss.synced = id, terms, true
	ss.renewals++ // every term there was put on before this renewal
	return renewed, nil
}

// knowsExactly reports whether items name the terms ss knows to be on its
// session, each once, and leave out only terms put on since its last
// renewal, so that a renewal of the session alone may renew them; and which
// of them changed their runner state.
func (ss *session) knowsExactly(items []store.RenewItem) (changed []store.RenewItem, exact bool) {
	if !ss.synced || ss.id == 0 || len(items) > len(ss.terms) {
		return nil, false
	}
	ss.pass++
	for _, it := range items {
		t, ok := ss.terms[it.Key]
		if !ok || t.epoch != it.Epoch || t.pass == ss.pass {
			return nil, false // not on the session, or named twice
		}
		t.pass = ss.pass
		if t.running != it.Running {
			changed = append(changed, it)
		}
	}
	if len(items) < len(ss.terms) {
		for _, t := range ss.terms {
			if t.pass != ss.pass && t.since != ss.renewals {
				return nil, false // a term no renewal wants: the slow path takes it off
			}
		}
	}
	return changed, true
}

// renewSession renews every term on ss's session with one write, and
// records the runner states that changed: ok means every term was renewed;
// ok false, that the session is dead or changed behind the Store's back,
// and nothing was written.
func (s *Store) renewSession(ctx context.Context, tx *sql.Tx, ss *session, owner string, ttl time.Duration, changed []store.RenewItem) (ok bool, err error) {
	var id int64
	err = tx.QueryRowContext(ctx, s.q.renewSession, ss.id, owner, ttl.Microseconds(), len(ss.terms)).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	if len(changed) > 0 {
		arg, err := json.Marshal(dedupe(changed))
		if err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, s.q.setRunning, ss.id, string(arg)); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	for _, it := range changed {
		ss.terms[it.Key].running = it.Running
	}
	ss.renewals++
	return true, nil
}

// sessionTerms reads every term on session id, as put on at renewals.
func (s *Store) sessionTerms(ctx context.Context, tx *sql.Tx, id int64, renewals uint64) (map[string]*sessionTerm, error) {
	rows, err := tx.QueryContext(ctx, s.q.sessionTerms, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	terms := map[string]*sessionTerm{}
	for rows.Next() {
		var key string
		t := &sessionTerm{since: renewals}
		if err := rows.Scan(&key, &t.epoch, &t.running); err != nil {
			return nil, err
		}
		terms[key] = t
	}
	return terms, rows.Err()
}

// scanTerms hands each (key, epoch) row of a query's result to fn.
func scanTerms(rows *sql.Rows, err error) func(fn func(store.Term)) error {
	return func(fn func(store.Term)) error {
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
}
