package etcd

import (
	"context"
	"time"
)

// A claim may be dated back (store.AcquireRequest.MaxElapsed): a session
// whose last keep-alive, sent at aliveAt, found it alive lives until at
// least aliveAt + ttl + grace on the server's lease clock, so a term put
// on it needs no keep-alive of its own to live until aliveAt + ttl, and
// the claim spares the round trip it would wait for, as a mutex put on
// its session does. Its holder counts the term from aliveAt (Elapsed).
//
// Two checks keep that within what the caller allowed. Before the write
// (datable), the session must have been found alive within MaxElapsed of
// the claim's start, or the claim keeps it alive as before. After it
// (settleDated), within MaxElapsed of the moment it returns, since the
// caller's first renewal of the term may come a renewal period after
// that: a write that took long is followed by a keep-alive instead, and
// the term is not dated. Both read Store.now, a clock that counts the
// time the host spends suspended: the lease's clock runs on meanwhile.

// datable reports whether a claim that began at start may put its term on
// sess without keeping it alive.
func (s *Store) datable(sess *session, start time.Time, maxElapsed time.Duration) bool {
	if maxElapsed <= 0 {
		return false
	}
	at := s.aliveSince(sess)
	return !at.IsZero() && start.Sub(at) <= maxElapsed
}

// settleDated dates a term that a committed write put on sess without a
// keep-alive: from the session's last keep-alive when that is still within
// maxElapsed, otherwise not at all, after a keep-alive sent now. It
// reports false when that keep-alive found the session ended (the term
// with it); an error leaves the term unconfirmed.
func (s *Store) settleDated(ctx context.Context, sess *session, start time.Time, maxElapsed time.Duration) (time.Duration, bool, error) {
	at := s.aliveSince(sess)
	if s.now().Sub(at) <= maxElapsed {
		return max(start.Sub(at), 0), true, nil
	}
	alive, err := s.keepAlive(ctx, sess)
	return 0, alive, err
}

// aliveSince is when a keep-alive last found sess alive (Store.now's
// clock).
func (s *Store) aliveSince(sess *session) time.Time {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	return sess.aliveAt
}
