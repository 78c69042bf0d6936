package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
)

// maxAttempts bounds how often Acquire and Revoke re-read a key whose
// record changed between their read and their write. Each failed attempt
// means another writer succeeded, so the next read usually settles it.
const maxAttempts = 16

// parallel is how many requests one call keeps in flight when a batch
// spans several transactions. They share one HTTP/2 connection, so the
// batch still costs about one round trip.
const parallel = 16

// Acquire starts a new term of req.Key for req.Owner when the key is free:
// none of its keys, a released term, the owner's own term, or neither the
// live nor the grace key left (the last term ended at least its grace
// ago, on the server's lease clock). The term's live key goes on the owner's
// session for its TTL and grace (session.go).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, err
	}
	if s.isClosed() {
		return store.AcquireResult{}, store.ErrClosed
	}
	start := s.now()
	ttlSecs, graceSecs := s.ttlSeconds(req.TTL), ceilSeconds(req.Grace)
	if h, ok := s.takeHint(req.Key); ok {
		res, done, err := s.acquireReleased(ctx, req, h, ttlSecs, graceSecs, start)
		if err != nil {
			return store.AcquireResult{}, s.wrap("acquire", err)
		}
		if done {
			return res, nil
		}
	}
	// A key without a record is claimed in one transaction when the
	// owner's session was renewed lately; otherwise that transaction's
	// read is where the loop starts.
	var read *acquireRead
	if sess := s.lookupSession(req.Owner, ttlSecs, graceSecs); sess != nil && s.renewedLately(sess) {
		res, r, err := s.acquireUnread(ctx, req, sess, graceSecs, start)
		if err != nil {
			return store.AcquireResult{}, s.wrap("acquire", err)
		}
		if res.Acquired {
			return res, nil
		}
		read = r
	}
	for range maxAttempts {
		if read == nil {
			var err error
			if read, err = s.readForAcquire(ctx, req.Key, req.Owner, ttlSecs, graceSecs); err != nil {
				return store.AcquireResult{}, s.wrap("acquire", err)
			}
		}
		sess, v, rev, dated := read.sess, read.v, read.rev, read.dated
		read = nil
		if !free(v, req.Owner) {
			if v.rec == nil {
				v.rec = orphanRecord(v)
			}
			holder, err := s.leases(ctx, []*view{v})
			if err != nil {
				return store.AcquireResult{}, s.wrap("acquire", err)
			}
			return store.AcquireResult{Holder: holder[0]}, nil
		}
		if sess == nil {
			// No session renewed lately: one now, only for a free key.
			var err error
			if sess, err = s.liveSession(ctx, req.Owner, ttlSecs, graceSecs, false); err != nil {
				return store.AcquireResult{}, s.wrap("acquire", err)
			}
			dated = false
		}
		epoch := rev + 1 // see doc.go: epochs outlive a deleted namespace
		cmp := clientv3.Compare(clientv3.CreateRevision(s.recordKey(req.Key)), "=", 0)
		if v.rec != nil {
			epoch = max(epoch, v.rec.epoch+1)
			cmp = clientv3.Compare(clientv3.ModRevision(s.recordKey(req.Key)), "=", v.recRev)
		}
		// An old term of the key may be on one of the holder's sessions,
		// or of this owner's (even one whose record is gone): no renewal
		// may take the key's presence there for that term.
		s.forget(req.Owner, req.Key)
		if v.rec != nil && v.rec.state == stateHeld && v.rec.owner != req.Owner {
			s.forget(v.rec.owner, req.Key)
		}
		rec := record{epoch: epoch, owner: req.Owner, state: stateHeld, running: req.Running, grace: graceSecs}
		resp, err := s.client.Txn(ctx).If(cmp).Then(
			clientv3.OpPut(s.recordKey(req.Key), rec.encode()),
			clientv3.OpPut(s.liveKey(req.Key), liveValue(epoch, req.Owner), clientv3.WithLease(sess.lease)),
			clientv3.OpDelete(s.graceKey(req.Key)),
		).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.dropSession(sess) // it ended between the keep-alive and the write
			continue
		}
		if err != nil {
			return store.AcquireResult{}, s.wrap("acquire", err)
		}
		if !resp.Succeeded {
			continue
		}
		var elapsed time.Duration
		if dated {
			var alive bool
			if elapsed, alive, err = s.settleDated(ctx, sess, start, req.MaxElapsed); err != nil {
				return store.AcquireResult{}, s.wrap("acquire", err)
			}
			if !alive {
				continue // the session ended, with the term on it
			}
		}
		s.join(sess, req.Key, member{epoch: epoch, running: req.Running})
		return store.AcquireResult{Acquired: true, Epoch: epoch, Elapsed: elapsed}, nil
	}
	return store.AcquireResult{}, fmt.Errorf("etcd: acquire %q: the record or the session kept changing over %d attempts", req.Key, maxAttempts)
}

// readForAcquire reads key and, when the owner has a session a renewal
// kept alive lately, keeps it alive at the same time, so that it ends no
// earlier than this call's start + ttl + grace. Otherwise it returns a nil
// session: a refused acquisition then grants none.
func (s *Store) readForAcquire(ctx context.Context, key, owner string, ttl, grace int64) (*acquireRead, error) {
	sess := s.lookupSession(owner, ttl, grace)
	if sess == nil || !s.renewedLately(sess) {
		v, rev, err := s.readOne(ctx, key)
		return &acquireRead{v: v, rev: rev}, err
	}
	read := &acquireRead{}
	alive, err := s.whileKeptAlive(ctx, sess, func() (err error) {
		read.v, read.rev, err = s.readOne(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	if alive {
		read.sess = sess
	}
	return read, nil
}

// free reports whether owner may start a new term of the key seen in v.
// The owner of the current term may always start a new one: the grace
// period protects only it, and the new epoch fences its old term.
func free(v *view, owner string) bool {
	switch {
	case v.rec == nil:
		// A term's live or grace key may be left without its record
		// (deleted by hand): peers wait for them as for any term, and
		// the owner of a live key may start a new term, as of its own
		// record.
		return v.grace == nil && (v.live == nil || orphanRecord(v).owner == owner)
	case v.rec.state == stateReleased:
		return true
	case v.rec.state == stateHeld && v.rec.owner == owner:
		return true
	default: // a peer's term, or a revoked one: wait for both leases
		return v.live == nil && v.grace == nil
	}
}

// orphanRecord stands in for the record of a term whose live or grace key
// is left without it: the term they name, held, its grace unknown.
func orphanRecord(v *view) *record {
	rec := &record{state: stateHeld}
	switch {
	case v.live != nil:
		epoch, owner, _ := strings.Cut(string(v.live.Value), "\t")
		rec.owner = owner
		if rec.epoch, _ = strconv.ParseInt(epoch, 10, 64); rec.epoch == 0 {
			rec.epoch = v.live.CreateRevision // an implicit term (record.go)
		}
	case v.grace != nil:
		rec.epoch, _ = strconv.ParseInt(string(v.grace.Value), 10, 64)
	}
	return rec
}

// Revoke moves key's live term to a new epoch owned by nobody. The live
// key goes, so the holder's next renewal is refused; peers wait as for
// any term, on the grace key: a term acquired before sessions keeps its
// own, and a term on a session gets one on a lease as long as the
// session's, granted now (see retire). It reports false when the key has
// no live term.
func (s *Store) Revoke(ctx context.Context, key string) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if s.isClosed() {
		return false, store.ErrClosed
	}
	for range maxAttempts {
		v, rev, err := s.readOne(ctx, key)
		if err != nil {
			return false, s.wrap("revoke", err)
		}
		if v.rec == nil || v.rec.state != stateHeld || v.live == nil {
			return false, nil
		}
		rec := record{epoch: max(v.rec.epoch+1, rev+1), state: stateRevoked, grace: v.rec.grace}
		ops := []clientv3.Op{clientv3.OpPut(s.recordKey(key), rec.encode()), clientv3.OpDelete(s.liveKey(key))}
		var retired clientv3.LeaseID
		if v.grace == nil {
			// On a session, the live key stays through the grace.
			retired, err = s.retireLease(ctx, clientv3.LeaseID(v.live.Lease), v.rec.grace)
			if errors.Is(err, errLeaseEnded) {
				return false, nil // its live part is over
			}
			if err != nil {
				return false, s.wrap("revoke", err)
			}
			ops = append(ops, clientv3.OpPut(s.graceKey(key), fmtInt(v.rec.epoch), clientv3.WithLease(retired)))
		}
		resp, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.recordKey(key)), "=", v.recRev),
			clientv3.Compare(clientv3.ModRevision(s.liveKey(key)), "=", v.live.ModRevision),
		).Then(ops...).Commit()
		if err != nil {
			// The write may have happened, or may yet.
			if retired != 0 {
				s.settleRetired(ctx, key, v, retired)
			}
			return false, s.wrap("revoke", err)
		}
		if resp.Succeeded {
			if retired != 0 {
				if err := s.holdRetired(ctx, retired); err != nil {
					return true, s.wrap("revoke", err)
				}
			}
			return true, nil
		}
		if retired != 0 {
			s.revokeLeases(ctx, []clientv3.LeaseID{retired})
		}
	}
	return false, fmt.Errorf("etcd: revoke %q: the record kept changing over %d attempts", key, maxAttempts)
}

// retireLease grants the lease a term's grace key moves to when its live
// key leaves session lease live without the term ending (a revocation, or
// a term its holder stopped renewing): as long as live was granted for.
// Once the write that moves the key has succeeded, holdRetired counts it
// from then: a renewal may have found the key on the session just before
// the write and promised its holder a deadline of at most write + ttl, so
// peers, kept out until after write + ttl + grace, wait at least the grace
// past it. It fails with errLeaseEnded when live has less than minLeft
// seconds left.
func (s *Store) retireLease(ctx context.Context, live clientv3.LeaseID, minLeft int64) (clientv3.LeaseID, error) {
	ttl, err := s.client.TimeToLive(ctx, live)
	if err != nil {
		return 0, err
	}
	if ttl.TTL < max(minLeft, 0) {
		return 0, errLeaseEnded
	}
	resp, err := s.client.Grant(ctx, ttl.GrantedTTL)
	if err != nil {
		return 0, err
	}
	return resp.ID, nil
}

// readOne reads one key's view and the store revision it was read at.
func (s *Store) readOne(ctx context.Context, key string) (*view, int64, error) {
	resp, err := s.client.Get(ctx, s.keyPrefix(key), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	v, err := s.viewOf(key, resp.Kvs)
	if err != nil {
		return nil, 0, err
	}
	return v, resp.Header.Revision, nil
}

// viewOf groups the entries of a read of key's prefix into its view.
func (s *Store) viewOf(key string, kvs []*mvccpb.KeyValue) (*view, error) {
	vs, err := s.views(kvs, nil)
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 {
		return &view{key: key}, nil
	}
	return vs[0], nil
}

// readKeys reads the views of many keys: one transaction of prefix reads
// per chunk, the chunks in flight together.
func (s *Store) readKeys(ctx context.Context, keys []string) (map[string]*view, error) {
	chunks := chunk(keys, s.readChunk)
	results := make([][]*view, len(chunks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, c := range chunks {
		g.Go(func() error {
			ops := make([]clientv3.Op, len(c))
			for j, key := range c {
				ops[j] = clientv3.OpGet(s.keyPrefix(key), clientv3.WithPrefix())
			}
			resp, err := s.client.Txn(gctx).Then(ops...).Commit()
			if err != nil {
				return err
			}
			var vs []*view
			for j, r := range resp.Responses {
				n := len(vs)
				if vs, err = s.views(r.GetResponseRange().Kvs, vs); err != nil {
					return err
				}
				if len(vs) == n {
					vs = append(vs, &view{key: c[j]})
				}
			}
			results[i] = vs
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string]*view, len(keys))
	for _, vs := range results {
		for _, v := range vs {
			out[v.key] = v
		}
	}
	return out, nil
}

// ttlSeconds is the live part of a term, in seconds: ttl rounded up to
// whole seconds and at least the server's floor, once known.
func (s *Store) ttlSeconds(ttl time.Duration) int64 {
	return max(ceilSeconds(ttl), s.minTTL.Load())
}

// settleRetired follows a revocation whose answer was lost: its write may
// have happened, or may still happen (etcd applies a proposal that timed
// out for its client). A fence — the record rewritten as read, if it is
// still as read — decides: once it succeeds the revocation can never
// apply, and its retired lease goes; otherwise the revocation applied
// before the fence, and its retired lease is held from now on.
func (s *Store) settleRetired(ctx context.Context, key string, v *view, retired clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.recordKey(key)), "=", v.recRev),
	).Then(clientv3.OpPut(s.recordKey(key), v.rec.encode())).Commit()
	if err == nil && resp.Succeeded {
		s.revokeLeases(ctx, []clientv3.LeaseID{retired})
		return
	}
	_ = s.holdRetired(ctx, retired) // failing, it still ends ttl + grace after its grant
}

// settleTimeout bounds the calls that follow a write whose answer was lost
// or came too late for its caller: they run past the caller's context.
const settleTimeout = 5 * time.Second

// holdRetired keeps a retired lease alive once, after the write that put
// grace keys on it (see retireLease), trying a few times, past the
// caller's context: a write that timed out for its caller may have
// happened, and most need this then.
func (s *Store) holdRetired(ctx context.Context, retired clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	for range 3 {
		if _, err = s.client.KeepAliveOnce(ctx, retired); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("keep-alive of the retired lease after the write (a holder renewing at that moment may see its grace cut short): %w", err)
	}
	return nil
}

// revokeLeases revokes leases nothing was put on, best effort: a lease
// left behind expires by itself.
func (s *Store) revokeLeases(ctx context.Context, ids []clientv3.LeaseID) {
	if ctx.Err() != nil {
		return
	}
	var g errgroup.Group
	for _, id := range ids {
		g.Go(func() error {
			_, err := s.client.Revoke(ctx, id)
			return err
		})
	}
	_ = g.Wait() // best effort: a lease left behind expires by itself
}

func chunk[T any](xs []T, n int) [][]T {
	var out [][]T
	for len(xs) > n {
		out = append(out, xs[:n:n])
		xs = xs[n:]
	}
	if len(xs) > 0 {
		out = append(out, xs)
	}
	return out
}
