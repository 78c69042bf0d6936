package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// errLeaseEnded is a lease that was gone when asked about.
var errLeaseEnded = errors.New("the lease has ended")

// sessionID names the session an owner's terms of one TTL and one grace
// share.
type sessionID struct {
	owner      string
	ttl, grace int64 // seconds
}

// session is one etcd lease of ttl + grace seconds that the live keys of
// an owner's terms are put on, as etcd's concurrency package puts a
// mutex's key on its session: one keep-alive renews every term on it.
// Nothing else is put on the lease, so its keys are exactly the terms
// this store bound to it and has not moved off since.
//
// The fields below the mutex-free ones are guarded by Store.sessMu.
type session struct {
	id    sessionID
	ready chan struct{} // closed once the grant answered
	lease clientv3.LeaseID
	err   error // the grant's, when it failed

	// members is what this store put on the lease and still believes is
	// there: key → term. A term leaves it before the write that moves it
	// off (a new term, a release), so a renewal that finds the term
	// still a member after its keep-alive knows the key held this term.
	members map[string]member
	// renewedAt is when the grant was sent, or when the last renewal that
	// kept the session alive began its keep-alive, which was sent after
	// that (local monotonic clock). Until ttl after it, the
	// live part of the session has certainly not ended, and acquisitions
	// may keep it alive; past that, they start a new session, so a session
	// its renewals left (and every term on it) ends.
	renewedAt time.Time
	// aliveAt is when the latest keep-alive that found the lease alive was
	// sent (the grant's request, for a fresh one), whoever sent it: a
	// renewal or an acquisition, on Store.now's clock. The server reset
	// the lease's time to ttl + grace when it answered, so its live part
	// lasts until at least aliveAt + ttl. A claim may date its term from
	// it instead of sending a keep-alive of its own (dated.go).
	aliveAt time.Time
	// listed is, for each key on the lease, when a renewal last listed it
	// (or first found it there unlisted); see unlisted.
	listed map[string]time.Time

	// keepAlives shares keep-alives among the calls that overlap
	// (keepalive.go).
	keepAlives keepAlives
}

type member struct {
	epoch   int64
	running bool
	// implicit: the term's keys name it by their create revision
	// (record.go).
	implicit bool
}

// session returns owner's session for ttl and grace, granting its lease
// when there is none yet. fresh reports a lease granted by this call:
// it ends no earlier than the call's start + ttl + grace, while an older
// one needs a keep-alive to promise that.
func (s *Store) session(ctx context.Context, owner string, ttl, grace int64) (sess *session, fresh bool, err error) {
	id := sessionID{owner, ttl, grace}
	s.sessMu.Lock()
	sess = s.sessions[id]
	if sess == nil {
		s.sweepLocked()
		sess = &session{id: id, ready: make(chan struct{}), members: map[string]member{}, listed: map[string]time.Time{}}
		s.sessions[id] = sess
		fresh = true
	}
	s.sessMu.Unlock()
	if fresh {
		sent, aliveSent := time.Now(), s.now()
		resp, err := s.client.Grant(ctx, ttl+grace)
		if err == nil {
			sess.lease, sess.renewedAt, sess.aliveAt = resp.ID, sent, aliveSent
			if resp.TTL > ttl+grace {
				// The server's floor: a later session asks for it.
				s.minTTL.Store(resp.TTL - grace)
			}
		}
		sess.err = err
		close(sess.ready)
		if err != nil {
			s.dropSession(sess)
			return nil, false, err
		}
		return sess, true, nil
	}
	select {
	case <-sess.ready:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	if sess.err != nil {
		return nil, false, sess.err
	}
	return sess, false, nil
}

// sweepLocked forgets sessions that ended long ago: no renewal kept them
// alive for their whole lease (owners that are gone, sessions replaced).
// Called with sessMu, when a session is made.
func (s *Store) sweepLocked() {
	for id, sess := range s.sessions {
		select {
		case <-sess.ready:
		default:
			continue // being granted
		}
		if time.Since(sess.renewedAt) > time.Duration(id.ttl+id.grace)*time.Second {
			delete(s.sessions, id)
		}
	}
}

// lookupSession returns owner's session for ttl and grace once granted,
// or nil.
func (s *Store) lookupSession(owner string, ttl, grace int64) *session {
	s.sessMu.Lock()
	sess := s.sessions[sessionID{owner, ttl, grace}]
	s.sessMu.Unlock()
	if sess == nil {
		return nil
	}
	select {
	case <-sess.ready:
		if sess.err == nil {
			return sess
		}
	default:
	}
	return nil
}

// liveSession returns a session of owner for ttl and grace that ends no
// earlier than this call's start + ttl + grace: one granted now, or one a
// renewal kept alive lately, kept alive again (recorded as a renewal's
// keep-alive when renewal is set). A session no renewal kept alive for a ttl is left
// to end with whatever is on it.
func (s *Store) liveSession(ctx context.Context, owner string, ttl, grace int64, renewal bool) (*session, error) {
	for range maxAttempts {
		sess, fresh, err := s.session(ctx, owner, ttl, grace)
		if err != nil || fresh {
			return sess, err
		}
		if !s.renewedLately(sess) {
			s.dropSession(sess)
			continue
		}
		sent := time.Now()
		alive, err := s.keepAlive(ctx, sess)
		if err != nil {
			return nil, err
		}
		if alive {
			if renewal {
				s.renewed(sess, sent)
			}
			return sess, nil
		}
	}
	return nil, errors.New("no session lasted long enough to be kept alive")
}

// dropSession forgets sess: no renewal or acquisition uses it again, and
// its lease, no longer kept alive, ends with whatever is left on it.
func (s *Store) dropSession(sess *session) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.sessions[sess.id] == sess {
		delete(s.sessions, sess.id)
	}
}

// renewed records a renewal's keep-alive of sess, sent no earlier than
// sent.
func (s *Store) renewed(sess *session, sent time.Time) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if sent.After(sess.renewedAt) {
		sess.renewedAt = sent
	}
}

// keptAlive records that a keep-alive of sess sent no earlier than sent
// found it alive.
func (s *Store) keptAlive(sess *session, sent time.Time) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if sent.After(sess.aliveAt) {
		sess.aliveAt = sent
	}
}

// renewedLately reports whether a renewal kept sess alive less than its
// ttl ago. An acquisition keeps only such a session alive: one past its
// live part would bring back terms its renewals already reported lost,
// and one no renewal keeps would keep the terms on it — terms nobody
// renews any more — alive for as long as acquisitions go on.
func (s *Store) renewedLately(sess *session) bool {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	return time.Since(sess.renewedAt) < time.Duration(sess.id.ttl)*time.Second
}

// forget removes key from every session of owner, before a write that may
// move it off its lease: from then on no renewal takes the key's presence
// on a lease as proof of a term. The key counts as just listed, so no
// renewal evicts what the write puts there.
func (s *Store) forget(owner, key string) {
	now := time.Now()
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	for id, sess := range s.sessions {
		if id.owner == owner {
			delete(sess.members, key)
			if _, on := sess.listed[key]; on {
				sess.listed[key] = now
			}
		}
	}
}

// join records that key's term now lies on sess's lease.
func (s *Store) join(sess *session, key string, m member) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	sess.members[key] = m
	sess.listed[key] = time.Now()
}

// unlisted notes which keys on the lease (on) this renewal listed and
// returns those no renewal listed for longer than the session's TTL, with
// the term it knows each holds (the zero member when it knows none). The
// terms there are ones their holder stopped renewing without a release
// (it gave up on a deadline, or left a runner that would not stop to
// expire): keeping the session alive must not keep them alive forever.
// Waiting a whole TTL lets several callers share one owner and store,
// each renewing its own keys every renewal period. Called with sessMu.
func (sess *session) unlisted(on, listed map[string]bool, now time.Time) (stale []string, terms []member) {
	for key := range on {
		at, known := sess.listed[key]
		switch {
		case listed[key] || !known:
			sess.listed[key] = now
		case now.Sub(at) > time.Duration(sess.id.ttl)*time.Second:
			stale = append(stale, key)
			terms = append(terms, sess.members[key])
		}
	}
	for key := range sess.listed {
		if !on[key] {
			delete(sess.listed, key)
		}
	}
	return stale, terms
}

// evict moves the live keys of terms nobody renews off sess's lease: each
// gets a grace key on a retired lease (retireLease), so peers still wait
// until no deadline the holder was ever told of can be running. A key is
// moved only if its live key is still on the session and still holds the
// term the renewal that chose it knew of (terms; the zero member for a key
// it knew no term of, which is moved only if not written after revision
// seen, when that renewal listed the lease's keys): a new term since then
// stays.
// Best effort: a key left on the lease is evicted by a later renewal.
func (s *Store) evict(ctx context.Context, sess *session, owner string, keys []string, terms []member, seen int64) {
	retired, err := s.retireLease(ctx, sess.lease, 0)
	if err != nil {
		return
	}
	s.sessMu.Lock()
	for i, key := range keys {
		if sess.members[key].epoch == terms[i].epoch {
			delete(sess.members, key)
			delete(sess.listed, key)
		}
	}
	s.sessMu.Unlock()
	moved := false
	for from := 0; from < len(keys); from += s.writeChunk {
		to := min(from+s.writeChunk, len(keys))
		nested := make([]clientv3.Op, 0, to-from)
		for i := from; i < to; i++ {
			live, m := s.liveKey(keys[i]), terms[i]
			same := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(live), "<", seen+1)}
			if m.epoch != 0 {
				same = s.liveHolds(term{key: keys[i], epoch: m.epoch, implicit: m.implicit}, owner)
			}
			nested = append(nested, clientv3.OpTxn(
				append(same, clientv3.Compare(clientv3.LeaseValue(live), "=", sess.lease)),
				[]clientv3.Op{
					clientv3.OpDelete(live),
					clientv3.OpPut(s.graceKey(keys[i]), fmtInt(m.epoch), clientv3.WithLease(retired)),
				}, nil))
		}
		resp, err := s.client.Txn(ctx).Then(nested...).Commit()
		if err != nil {
			// The write may have happened: leave the retired lease, and
			// hold it from now on, as after a write that did.
			moved = true
			break
		}
		for _, r := range resp.Responses {
			moved = moved || r.GetResponseTxn().GetSucceeded()
		}
	}
	if !moved {
		s.revokeLeases(ctx, []clientv3.LeaseID{retired})
		return
	}
	_ = s.holdRetired(ctx, retired) // failing, it still ends ttl + grace after its grant
}

// timesToLive asks for the time left of each lease, in whole seconds
// rounded down (-1 once it is gone).
func (s *Store) timesToLive(ctx context.Context, ids []clientv3.LeaseID) (map[clientv3.LeaseID]int64, error) {
	resps, err := s.leaseTTLs(ctx, ids)
	if err != nil {
		return nil, err
	}
	left := make(map[clientv3.LeaseID]int64, len(resps))
	for id, r := range resps {
		left[id] = r.TTL
	}
	return left, nil
}

// leaseTTLs asks TimeToLive of each lease, sixteen at a time.
func (s *Store) leaseTTLs(ctx context.Context, ids []clientv3.LeaseID) (map[clientv3.LeaseID]*clientv3.LeaseTimeToLiveResponse, error) {
	out := make(map[clientv3.LeaseID]*clientv3.LeaseTimeToLiveResponse, len(ids))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, id := range ids {
		g.Go(func() error {
			resp, err := s.client.TimeToLive(gctx, id)
			if err != nil {
				return err
			}
			mu.Lock()
			out[id] = resp
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
