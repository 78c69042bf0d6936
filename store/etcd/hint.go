package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/store"
)

// maxHints bounds the released records a store remembers from its
// watches.
const maxHints = 4096

// hint is a released record a watch of this store saw: its value and the
// revision that wrote it.
type hint struct {
	rec    record
	recRev int64
}

// noteRecord remembers a released record seen by a watch, and forgets the
// key's hint on any other change of its record, before the event reaches
// the watcher: a peer reacting to a release can then acquire without
// reading the key first (acquireReleased).
func (s *Store) noteRecord(key string, kv *clientv3.Event) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	if kv.Type != clientv3.EventTypePut {
		delete(s.hints, key)
		return
	}
	rec, err := decodeRecord(key, kv.Kv)
	if err != nil || rec.state != stateReleased {
		delete(s.hints, key)
		return
	}
	if len(s.hints) >= maxHints {
		clear(s.hints) // an old release is read again, at the cost of a read
	}
	s.hints[key] = hint{rec: rec, recRev: kv.Kv.ModRevision}
}

// takeHint returns and forgets key's hint.
func (s *Store) takeHint(key string) (hint, bool) {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	h, ok := s.hints[key]
	delete(s.hints, key)
	return h, ok
}

// acquireReleased tries to start a new term of a key whose release a
// watch reported, with no read: the transaction holds only if the record
// is still the released one (a released record's term has no live or
// grace key left, so the key is free), and the owner's session is kept
// alive at the same time. It reports false, with no error, when the key
// changed since or the session had ended: Acquire then reads as usual. A
// session found alive within req.MaxElapsed of start is not kept alive:
// the term is dated instead (dated.go).
func (s *Store) acquireReleased(ctx context.Context, req store.AcquireRequest, h hint, ttl, grace int64, start time.Time) (store.AcquireResult, bool, error) {
	// A session a renewal kept alive lately is kept alive with the write;
	// otherwise one is made ready first.
	sess := s.lookupSession(req.Owner, ttl, grace)
	ready := sess == nil || !s.renewedLately(sess)
	if ready {
		var err error
		if sess, err = s.liveSession(ctx, req.Owner, ttl, grace, false); err != nil {
			return store.AcquireResult{}, false, err
		}
	}
	epoch := max(h.rec.epoch+1, h.recRev+1) // see doc.go: epochs
	rec := record{epoch: epoch, owner: req.Owner, state: stateHeld, running: req.Running, grace: grace}
	dated := !ready && s.datable(sess, start, req.MaxElapsed)
	kept := sess
	if ready || dated {
		kept = nil
	}
	resp, alive, err := s.commitKeptAlive(ctx, kept, s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.recordKey(req.Key)), "=", h.recRev),
	).Then(
		clientv3.OpPut(s.recordKey(req.Key), rec.encode()),
		clientv3.OpPut(s.liveKey(req.Key), liveValue(epoch, req.Owner), clientv3.WithLease(sess.lease)),
		clientv3.OpDelete(s.graceKey(req.Key)),
	))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.dropSession(sess)
		return store.AcquireResult{}, false, nil
	case err != nil:
		// A keep-alive's error: the term may be on a session that ends
		// before the promised ttl, so it is not confirmed.
		return store.AcquireResult{}, false, err
	case !resp.Succeeded:
		return store.AcquireResult{}, false, nil
	case !alive:
		// The session ended as the term was put on it, and took the live
		// key along: the term is over before it began. Acquire again.
		return store.AcquireResult{}, false, nil
	}
	var elapsed time.Duration
	if dated {
		if elapsed, alive, err = s.settleDated(ctx, sess, start, req.MaxElapsed); err != nil || !alive {
			return store.AcquireResult{}, false, err // unconfirmed, or over with its session
		}
	}
	s.join(sess, req.Key, member{epoch: epoch, running: req.Running})
	return store.AcquireResult{Acquired: true, Epoch: epoch, Elapsed: elapsed}, true, nil
}
