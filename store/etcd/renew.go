package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
)

// batch is what the store remembers of an owner's last renewal that moved
// terms onto fresh leases: the leases, and every term it attached to them.
// Terms only ever leave those leases (release, revocation, a new term), so
// members is exact or too large, never too small; a renewal whose terms
// are exactly the members, all still on these leases, may therefore keep
// the leases alive instead of writing anything.
type batch struct {
	leases  *grant
	members map[string]int64 // key → epoch
}

// candidate is a renewal item whose term the read found current.
type candidate struct {
	item store.RenewItem
	v    *view
}

// Renew extends every listed term of owner: one read of the listed keys,
// then either two lease keep-alives for the whole batch (when the terms
// are exactly those the owner's last renewal bound to shared leases) or
// one write that binds the current terms to two freshly granted leases.
func (s *Store) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if err := store.ValidateRenew(owner, ttl, items); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	renewed := make([]bool, len(items))
	if len(items) == 0 {
		return renewed, nil
	}
	var keys []string
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		if !seen[it.Key] {
			seen[it.Key] = true
			keys = append(keys, it.Key)
		}
	}
	views, err := s.readKeys(ctx, keys)
	if err != nil {
		return nil, s.wrap("renew", err)
	}
	// At most one term of a key is current; an item repeating it gets the
	// same answer.
	cands := make(map[string]*candidate)
	var order []*candidate
	for _, it := range items {
		v := views[it.Key]
		if _, dup := cands[it.Key]; dup || v == nil || !v.current(owner, it.Epoch) {
			continue
		}
		c := &candidate{item: it, v: v}
		cands[it.Key] = c
		order = append(order, c)
	}
	var ok map[string]bool
	if len(order) > 0 {
		ttlSecs := s.ttlSeconds(ttl)
		if b := s.sameBatch(owner, ttlSecs, cands); b != nil {
			ok, err = s.keepAlive(ctx, owner, b, order)
		} else {
			ok, err = s.rebind(ctx, owner, ttlSecs, order)
		}
		if err != nil {
			return nil, s.wrap("renew", err)
		}
	}
	for i, it := range items {
		c := cands[it.Key]
		renewed[i] = c != nil && c.item.Epoch == it.Epoch && ok[it.Key]
	}
	return renewed, nil
}

// sameBatch returns owner's remembered batch when the candidates are
// exactly its members and every one of them is still on its leases.
func (s *Store) sameBatch(owner string, ttl int64, cands map[string]*candidate) *batch {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	b := s.batches[owner]
	if b == nil || b.leases.ttl != ttl || len(b.members) != len(cands) {
		return nil
	}
	for key, c := range cands {
		g, hasGrace := b.leases.grace[c.v.rec.grace]
		if b.members[key] != c.item.Epoch || clientv3.LeaseID(c.v.live.Lease) != b.leases.live ||
			!hasGrace || c.v.grace == nil || clientv3.LeaseID(c.v.grace.Lease) != g {
			return nil
		}
	}
	return b
}

// keepAlive renews a whole batch by refreshing its leases: the live lease
// first, then the grace leases, so each grace key still outlives its live
// key by the grace — and never a grace lease whose live lease had expired,
// which would hold peers off a term nobody holds. Only running flags that
// changed are written.
func (s *Store) keepAlive(ctx context.Context, owner string, b *batch, order []*candidate) (map[string]bool, error) {
	if _, err := s.client.KeepAliveOnce(ctx, b.leases.live); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.dropBatch(owner, b)
			return nil, nil // expired: every term is lost
		}
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, id := range b.leases.grace {
		g.Go(func() error {
			_, err := s.client.KeepAliveOnce(gctx, id)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		// A grace lease cannot end before its live lease unless someone
		// revoked it; without it a peer could start right at expiry, so
		// the renewal is not confirmed and the next one rebinds.
		s.dropBatch(owner, b)
		return nil, fmt.Errorf("keep-alive of a grace lease: %w", err)
	}
	var changed []*candidate
	for _, c := range order {
		if c.item.Running != c.v.rec.running {
			changed = append(changed, c)
		}
	}
	ok, err := s.writeTerms(ctx, changed, func(c *candidate) []clientv3.Op {
		rec := *c.v.rec
		rec.running = c.item.Running
		return []clientv3.Op{clientv3.OpPut(s.recordKey(c.item.Key), rec.encode())}
	})
	if err != nil {
		return nil, err
	}
	for _, c := range order {
		if _, wrote := ok[c.item.Key]; !wrote {
			ok[c.item.Key] = true
		}
	}
	return ok, nil
}

// rebind moves every current term onto a live lease of ttl seconds and a
// grace lease per grace, granted now, and remembers them as owner's batch.
func (s *Store) rebind(ctx context.Context, owner string, ttl int64, order []*candidate) (map[string]bool, error) {
	var graces []int64
	for _, c := range order {
		if !containsInt(graces, c.v.rec.grace) {
			graces = append(graces, c.v.rec.grace)
		}
	}
	gr, err := s.grant(ctx, ttl, graces)
	if err != nil {
		return nil, err
	}
	ok, err := s.writeTerms(ctx, order, func(c *candidate) []clientv3.Op {
		ops := []clientv3.Op{
			clientv3.OpPut(s.liveKey(c.item.Key), string(c.v.live.Value), clientv3.WithLease(gr.live)),
			clientv3.OpPut(s.graceKey(c.item.Key), fmtInt(c.item.Epoch), clientv3.WithLease(gr.grace[c.v.rec.grace])),
		}
		if c.item.Running != c.v.rec.running {
			rec := *c.v.rec
			rec.running = c.item.Running
			ops = append(ops, clientv3.OpPut(s.recordKey(c.item.Key), rec.encode()))
		}
		return ops
	})
	if err != nil {
		// Some terms may be on the new leases; the next renewal rebinds.
		s.dropBatch(owner, nil)
		return nil, err
	}
	b := &batch{leases: gr, members: make(map[string]int64, len(ok))}
	for _, c := range order {
		if ok[c.item.Key] {
			b.members[c.item.Key] = c.item.Epoch
		}
	}
	s.batchMu.Lock()
	if len(b.members) > 0 {
		s.batches[owner] = b
	} else {
		delete(s.batches, owner)
	}
	s.batchMu.Unlock()
	if len(b.members) == 0 {
		s.revokeUnused(ctx, gr)
	}
	return ok, nil
}

// writeTerms runs ops(c) for every candidate whose live key still holds
// its term, each in a nested transaction of its own, the candidates in
// transactions of writeChunk, in flight together. It reports which were
// written.
func (s *Store) writeTerms(ctx context.Context, cands []*candidate, ops func(*candidate) []clientv3.Op) (map[string]bool, error) {
	ok := make(map[string]bool, len(cands))
	chunks := chunk(cands, s.writeChunk)
	results := make([][]bool, len(chunks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, cs := range chunks {
		g.Go(func() error {
			nested := make([]clientv3.Op, len(cs))
			for j, c := range cs {
				nested[j] = clientv3.OpTxn(
					[]clientv3.Cmp{clientv3.Compare(clientv3.Value(s.liveKey(c.item.Key)), "=", liveValue(c.item.Epoch, c.v.rec.owner))},
					ops(c), nil)
			}
			resp, err := s.client.Txn(gctx).Then(nested...).Commit()
			if err != nil {
				return err
			}
			results[i] = make([]bool, len(cs))
			for j, r := range resp.Responses {
				results[i][j] = r.GetResponseTxn().GetSucceeded()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for i, cs := range chunks {
		for j, c := range cs {
			ok[c.item.Key] = results[i][j]
		}
	}
	return ok, nil
}

// Release ends every listed term of owner that is still its held term,
// live or expired, in one round trip: the record says released, and the
// live and grace keys go, so a peer may acquire at once.
func (s *Store) Release(ctx context.Context, owner string, terms []store.Term) error {
	if err := store.ValidateRelease(owner, terms); err != nil {
		return err
	}
	if s.isClosed() {
		return store.ErrClosed
	}
	if len(terms) == 0 {
		return nil
	}
	// etcd refuses a transaction that writes one key twice, even in
	// branches that exclude each other: a key listed again goes into the
	// next round of transactions (sent at the same time).
	var rounds [][]store.Term
	count := make(map[string]int, len(terms))
	for _, t := range terms {
		n := count[t.Key]
		count[t.Key]++
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], t)
	}
	var chunks [][]store.Term
	for _, r := range rounds {
		chunks = append(chunks, chunk(r, s.writeChunk)...)
	}
	results := make([][]bool, len(chunks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, ts := range chunks {
		g.Go(func() error {
			nested := make([]clientv3.Op, len(ts))
			for j, t := range ts {
				rk := s.recordKey(t.Key)
				rec := record{epoch: t.Epoch, owner: owner, state: stateReleased}
				nested[j] = clientv3.OpTxn(
					[]clientv3.Cmp{
						clientv3.Compare(clientv3.Value(rk), ">", heldPrefix(t.Epoch, owner)),
						clientv3.Compare(clientv3.Value(rk), "<", heldPrefixEnd(t.Epoch, owner)),
					},
					[]clientv3.Op{
						clientv3.OpPut(rk, rec.encode()),
						clientv3.OpDelete(s.liveKey(t.Key)),
						clientv3.OpDelete(s.graceKey(t.Key)),
					}, nil)
			}
			resp, err := s.client.Txn(gctx).Then(nested...).Commit()
			if err != nil {
				return err
			}
			results[i] = make([]bool, len(ts))
			for j, r := range resp.Responses {
				results[i][j] = r.GetResponseTxn().GetSucceeded()
			}
			return nil
		})
	}
	err := g.Wait()
	// Forget released terms even after an error: chunks that answered
	// did release theirs.
	for i, ts := range chunks {
		for j, t := range ts {
			if results[i] != nil && results[i][j] {
				s.forgetMember(owner, t.Key)
			}
		}
	}
	if err != nil {
		return s.wrap("release", err)
	}
	return nil
}

// forgetMember removes key from owner's batch once both of its keys left
// the batch's leases (a release deletes them, a new term re-puts them).
func (s *Store) forgetMember(owner, key string) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if b := s.batches[owner]; b != nil {
		delete(b.members, key)
	}
}

// dropBatch forgets owner's batch (only b, when b is not nil), so the next
// renewal writes its terms onto fresh leases.
func (s *Store) dropBatch(owner string, b *batch) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if b == nil || s.batches[owner] == b {
		delete(s.batches, owner)
	}
}

func containsInt(xs []int64, x int64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
