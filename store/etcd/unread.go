package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/store"
)

// acquireRead is what Acquire goes on from: a read of the key, the store
// revision it was read at, and the owner's session when it was kept alive
// with the read, or found alive lately enough to date a term on it (nil
// otherwise).
type acquireRead struct {
	sess *session
	v    *view
	rev  int64
	// dated: sess was not kept alive but found alive lately enough to
	// date a term written on it (dated.go).
	dated bool
}

// acquireUnread tries to start a new term of a key that has no record in
// one round trip, as etcd's mutex takes a free key: one transaction
// creates the record and the live key if the key has none of its keys
// (a live or grace key left without its record still keeps peers out, see
// free), and reads the key otherwise, while the owner's session, renewed
// lately, is kept alive. The term's epoch is the transaction's revision,
// which both keys keep as their create revision (record.go): above every
// epoch the key ever had, since each was at most the revision that wrote
// it, even if its record was deleted since. A read is returned when the
// key had keys already, for Acquire to go on from; neither a result nor a
// read when the session had ended. A session found alive within
// req.MaxElapsed of start (the call's start, on Store.now's clock) is
// not kept alive: the term is dated instead (dated.go).
func (s *Store) acquireUnread(ctx context.Context, req store.AcquireRequest, sess *session, grace int64, start time.Time) (store.AcquireResult, *acquireRead, error) {
	rk, live := s.recordKey(req.Key), s.liveKey(req.Key)
	// A term of the key this owner held before may still be a member: no
	// renewal may take the new live key's presence on the lease for it.
	s.forget(req.Owner, req.Key)
	rec := record{implicit: true, owner: req.Owner, state: stateHeld, running: req.Running, grace: grace}
	txn := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(rk), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(live), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(s.graceKey(req.Key)), "=", 0),
	).Then(
		clientv3.OpPut(rk, rec.encode()),
		clientv3.OpPut(live, liveValue(0, req.Owner), clientv3.WithLease(sess.lease)),
	).Else(clientv3.OpGet(s.keyPrefix(req.Key), clientv3.WithPrefix()))
	dated, kept := s.datable(sess, start, req.MaxElapsed), sess
	if dated {
		kept = nil
	}
	resp, alive, err := s.commitKeptAlive(ctx, kept, txn)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.dropSession(sess) // it ended between its last renewal and the write
		return store.AcquireResult{}, nil, nil
	case err != nil:
		return store.AcquireResult{}, nil, err
	case !resp.Succeeded:
		v, err := s.viewOf(req.Key, resp.Responses[0].GetResponseRange().Kvs)
		if err != nil {
			return store.AcquireResult{}, nil, err
		}
		read := &acquireRead{v: v, rev: resp.Header.Revision, dated: dated}
		if alive {
			read.sess = sess // kept alive since start, or to be dated once written
		}
		return store.AcquireResult{}, read, nil
	case !alive:
		// The session ended as the term was put on it, and took the live
		// key along: the term is over before it began. Acquire again.
		return store.AcquireResult{}, nil, nil
	}
	var elapsed time.Duration
	if dated {
		if elapsed, alive, err = s.settleDated(ctx, sess, start, req.MaxElapsed); err != nil || !alive {
			return store.AcquireResult{}, nil, err // unconfirmed, or over with its session
		}
	}
	epoch := resp.Header.Revision
	s.join(sess, req.Key, member{epoch: epoch, running: req.Running, implicit: true})
	return store.AcquireResult{Acquired: true, Epoch: epoch, Elapsed: elapsed}, nil, nil
}

// commitKeptAlive commits txn while sess is kept alive (whileKeptAlive),
// so that a term the transaction puts on the session ends no earlier than
// the call's start + ttl + grace.
func (s *Store) commitKeptAlive(ctx context.Context, sess *session, txn clientv3.Txn) (resp *clientv3.TxnResponse, alive bool, err error) {
	alive, err = s.whileKeptAlive(ctx, sess, func() (err error) {
		resp, err = txn.Commit()
		return err
	})
	return resp, alive, err
}
