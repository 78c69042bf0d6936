package etcd

import (
	"context"
	"fmt"
	"time"

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
// no record, a released term, the owner's own term, or neither the live
// nor the grace key left (the last term ended at least its grace ago, on
// the server's lease clock).
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, err
	}
	if s.isClosed() {
		return store.AcquireResult{}, store.ErrClosed
	}
	graceSecs := ceilSeconds(req.Grace)
	var leases *grant
	for range maxAttempts {
		v, rev, err := s.readOne(ctx, req.Key)
		if err != nil {
			return store.AcquireResult{}, s.wrap("acquire", err)
		}
		if !free(v, req.Owner) {
			s.revokeUnused(ctx, leases)
			holder, err := s.leases(ctx, []*view{v})
			if err != nil {
				return store.AcquireResult{}, s.wrap("acquire", err)
			}
			return store.AcquireResult{Holder: holder[0]}, nil
		}
		// Leases are granted after the first read (a refusal then costs
		// none) and kept across retries: granted after the call began,
		// they still end no earlier than its send time + ttl.
		if leases == nil {
			if leases, err = s.grant(ctx, s.ttlSeconds(req.TTL), []int64{graceSecs}); err != nil {
				return store.AcquireResult{}, s.wrap("acquire", err)
			}
		}
		epoch := rev + 1 // see doc.go: epochs outlive a deleted namespace
		cmp := clientv3.Compare(clientv3.CreateRevision(s.recordKey(req.Key)), "=", 0)
		if v.rec != nil {
			epoch = max(epoch, v.rec.epoch+1)
			cmp = clientv3.Compare(clientv3.ModRevision(s.recordKey(req.Key)), "=", v.recRev)
		}
		rec := record{epoch: epoch, owner: req.Owner, state: stateHeld, running: req.Running, grace: graceSecs}
		resp, err := s.client.Txn(ctx).If(cmp).Then(
			clientv3.OpPut(s.recordKey(req.Key), rec.encode()),
			clientv3.OpPut(s.liveKey(req.Key), liveValue(epoch, req.Owner), clientv3.WithLease(leases.live)),
			clientv3.OpPut(s.graceKey(req.Key), fmtInt(epoch), clientv3.WithLease(leases.grace[graceSecs])),
		).Commit()
		if err != nil {
			return store.AcquireResult{}, s.wrap("acquire", err)
		}
		if resp.Succeeded {
			if v.rec != nil && v.rec.state == stateHeld {
				// The old term's keys moved to the new leases.
				s.forgetMember(v.rec.owner, req.Key)
			}
			return store.AcquireResult{Acquired: true, Epoch: epoch}, nil
		}
	}
	s.revokeUnused(ctx, leases)
	return store.AcquireResult{}, fmt.Errorf("etcd: acquire %q: the record kept changing over %d attempts", req.Key, maxAttempts)
}

// free reports whether owner may start a new term of the key seen in v.
// The owner of the current term may always start a new one: the grace
// period protects only it, and the new epoch fences its old term.
func free(v *view, owner string) bool {
	switch {
	case v.rec == nil || v.rec.state == stateReleased:
		return true
	case v.rec.state == stateHeld && v.rec.owner == owner:
		return true
	default: // a peer's term, or a revoked one: wait for both leases
		return v.live == nil && v.grace == nil
	}
}

// Revoke moves key's live term to a new epoch owned by nobody. The live
// key goes, so the holder's next renewal is refused; the grace key stays
// on its lease, so peers wait for the old expiry + grace as for any term.
// It reports false when the key has no live term.
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
		resp, err := s.client.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.recordKey(key)), "=", v.recRev),
			clientv3.Compare(clientv3.ModRevision(s.liveKey(key)), "=", v.live.ModRevision),
		).Then(
			clientv3.OpPut(s.recordKey(key), rec.encode()),
			clientv3.OpDelete(s.liveKey(key)),
		).Commit()
		if err != nil {
			return false, s.wrap("revoke", err)
		}
		if resp.Succeeded {
			// The grace key stays on the holder's batch lease: that batch
			// must never be kept alive as a whole again.
			s.forgetBatchesOf(v.rec.owner, key)
			return true, nil
		}
	}
	return false, fmt.Errorf("etcd: revoke %q: the record kept changing over %d attempts", key, maxAttempts)
}

// readOne reads one key's view and the store revision it was read at.
func (s *Store) readOne(ctx context.Context, key string) (*view, int64, error) {
	resp, err := s.client.Get(ctx, s.keyPrefix(key), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	vs, err := s.views(resp.Kvs, nil)
	if err != nil {
		return nil, 0, err
	}
	if len(vs) == 0 {
		return &view{key: key}, resp.Header.Revision, nil
	}
	return vs[0], resp.Header.Revision, nil
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

// grant holds the leases of a new term or of a renewal batch: one live
// lease and one grace lease per grace.
type grant struct {
	ttl   int64 // seconds, as granted
	live  clientv3.LeaseID
	grace map[int64]clientv3.LeaseID // grace seconds → lease
}

// ttlSeconds is the live lease TTL for ttl: rounded up to whole seconds and
// at least the server's floor, once known.
func (s *Store) ttlSeconds(ttl time.Duration) int64 {
	return max(ceilSeconds(ttl), s.minTTL.Load())
}

// grant asks for a live lease of ttl seconds and a grace lease of ttl +
// grace seconds per grace, all at once. A server that raised the live TTL
// to its floor gets the short grace leases asked for again, so every grace
// lease outlives the live lease by its full grace.
func (s *Store) grant(ctx context.Context, ttl int64, graces []int64) (*grant, error) {
	gr := &grant{grace: make(map[int64]clientv3.LeaseID, len(graces))}
	var granted []clientv3.LeaseID
	fail := func(err error) (*grant, error) {
		s.revokeLeases(ctx, granted)
		return nil, err
	}
	type result struct {
		grace int64
		resp  *clientv3.LeaseGrantResponse
	}
	ask := func(graces []int64, liveToo bool) ([]result, error) {
		n := len(graces)
		if liveToo {
			n++
		}
		out := make([]result, n)
		g, gctx := errgroup.WithContext(ctx)
		for i := range n {
			g.Go(func() error {
				r := result{grace: -1}
				want := ttl
				if i < len(graces) {
					r.grace = graces[i]
					want = ttl + graces[i]
				}
				resp, err := s.client.Grant(gctx, want)
				if err != nil {
					return err
				}
				r.resp = resp
				out[i] = r
				return nil
			})
		}
		err := g.Wait()
		for _, r := range out {
			if r.resp != nil {
				granted = append(granted, r.resp.ID)
			}
		}
		return out, err
	}
	rs, err := ask(graces, true)
	if err != nil {
		return fail(err)
	}
	live := rs[len(rs)-1].resp
	gr.ttl, gr.live = live.TTL, live.ID
	if live.TTL > ttl {
		s.minTTL.Store(live.TTL)
	}
	var short []int64
	for _, r := range rs[:len(rs)-1] {
		if r.resp.TTL >= live.TTL+r.grace {
			gr.grace[r.grace] = r.resp.ID
		} else {
			short = append(short, r.grace)
		}
	}
	if len(short) > 0 {
		ttl = live.TTL
		again, err := ask(short, false)
		if err != nil {
			return fail(err)
		}
		for _, r := range again {
			gr.grace[r.grace] = r.resp.ID
		}
	}
	return gr, nil
}

// revokeUnused revokes the leases of an acquisition that did not happen,
// best effort: they would expire on their own.
func (s *Store) revokeUnused(ctx context.Context, gr *grant) {
	if gr == nil {
		return
	}
	ids := []clientv3.LeaseID{gr.live}
	for _, id := range gr.grace {
		ids = append(ids, id)
	}
	s.revokeLeases(ctx, ids)
}

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
