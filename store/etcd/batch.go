package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// maxBatches is how many lease pairs one owner's terms may be spread over.
// Each pair costs two keep-alives per renewal and a TimeToLive per List; a
// renewal that would exceed it folds the smallest pair into its new one.
const maxBatches = 4

// batch is a pair of leases a renewal bound terms to, and exactly which
// terms it bound. Terms only ever leave those leases — a release deletes
// their keys, a new term or a later renewal re-puts them elsewhere, a
// revocation deletes the live key — so members is exact or too large,
// never too small. A renewal listing every member, each still on these
// leases, therefore renews them all by keeping the leases alive: nothing
// else is on them.
type batch struct {
	leases  *grant
	members map[string]int64 // key → epoch
}

// intact reports whether every member of b is among the candidates, with
// its epoch and its keys still on b's leases.
func (b *batch) intact(ttl int64, cands map[string]*candidate) bool {
	if b.leases.ttl != ttl || len(b.members) == 0 {
		return false
	}
	for key, epoch := range b.members {
		c := cands[key]
		if c == nil || c.item.Epoch != epoch {
			return false
		}
		g, ok := b.leases.grace[c.v.rec.grace]
		if !ok || clientv3.LeaseID(c.v.live.Lease) != b.leases.live ||
			c.v.grace == nil || clientv3.LeaseID(c.v.grace.Lease) != g {
			return false
		}
	}
	return true
}

// renewCurrent renews the candidates (terms the read found current): the
// owner's intact batches by keep-alives, the rest by binding them to a
// new batch, both at once. Changed running flags are written afterwards.
func (s *Store) renewCurrent(ctx context.Context, owner string, ttl int64, cands map[string]*candidate, order []*candidate) (map[string]bool, error) {
	keep, rest := s.plan(owner, ttl, cands, order)
	var (
		mu sync.Mutex
		ok = make(map[string]bool, len(order))
	)
	g, gctx := errgroup.WithContext(ctx)
	for _, k := range keep {
		g.Go(func() error {
			alive, err := s.keepAlive(gctx, owner, k.b)
			if err != nil {
				return err
			}
			mu.Lock()
			for _, key := range k.keys {
				ok[key] = alive
			}
			mu.Unlock()
			return nil
		})
	}
	if len(rest) > 0 {
		g.Go(func() error {
			bound, err := s.rebind(gctx, owner, ttl, rest)
			if err != nil {
				return err
			}
			mu.Lock()
			for key, v := range bound {
				ok[key] = v
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// A rebind wrote the flags with the keys; kept batches write only the
	// flags that changed.
	var changed []*candidate
	for _, k := range keep {
		for _, key := range k.keys {
			if c := cands[key]; ok[key] && c.item.Running != c.v.rec.running {
				changed = append(changed, c)
			}
		}
	}
	written, err := s.writeTerms(ctx, changed, func(c *candidate) []clientv3.Op {
		rec := *c.v.rec
		rec.running = c.item.Running
		return []clientv3.Op{clientv3.OpPut(s.recordKey(c.item.Key), rec.encode())}
	})
	if err != nil {
		return nil, err
	}
	for key, w := range written {
		ok[key] = w // a term that changed since the read is lost
	}
	return ok, nil
}

// kept is a batch a renewal keeps alive, with its members at the time:
// a release may remove members while the renewal runs.
type kept struct {
	b    *batch
	keys []string
}

// plan picks the owner's batches to keep alive and the candidates to
// rebind, and forgets every other batch: those are not kept alive again,
// and whatever terms are left on them expire.
func (s *Store) plan(owner string, ttl int64, cands map[string]*candidate, order []*candidate) (keep []kept, rest []*candidate) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	var intact []*batch
	covered := 0
	for _, b := range s.batches[owner] {
		if b.intact(ttl, cands) {
			intact = append(intact, b)
			covered += len(b.members)
		}
	}
	if covered < len(order) && len(intact) >= maxBatches {
		// Room for the new batch: fold the smallest kept ones into it.
		slices.SortFunc(intact, func(a, b *batch) int { return len(b.members) - len(a.members) })
		intact = intact[:maxBatches-1]
	}
	claimed := make(map[string]bool, len(order))
	for _, b := range intact {
		k := kept{b: b, keys: make([]string, 0, len(b.members))}
		for key := range b.members {
			claimed[key] = true
			k.keys = append(k.keys, key)
		}
		keep = append(keep, k)
	}
	for _, c := range order {
		if !claimed[c.item.Key] {
			rest = append(rest, c)
		}
	}
	if len(intact) == 0 {
		delete(s.batches, owner)
	} else {
		s.batches[owner] = intact
	}
	return keep, rest
}

// keepAlive renews a batch by refreshing its leases: the live lease first,
// then the grace leases, so each grace key still outlives its live key by
// the grace — and never a grace lease whose live lease had expired, which
// would hold peers off terms nobody holds. It reports false when the live
// lease had expired: every member is lost.
func (s *Store) keepAlive(ctx context.Context, owner string, b *batch) (bool, error) {
	if _, err := s.client.KeepAliveOnce(ctx, b.leases.live); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.dropBatch(owner, b)
			return false, nil
		}
		return false, err
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
		return false, fmt.Errorf("keep-alive of a grace lease: %w", err)
	}
	return true, nil
}

// rebind moves terms onto a live lease of ttl seconds and a grace lease
// per grace, granted now, and remembers them as a batch of owner.
func (s *Store) rebind(ctx context.Context, owner string, ttl int64, cands []*candidate) (map[string]bool, error) {
	var graces []int64
	for _, c := range cands {
		if !slices.Contains(graces, c.v.rec.grace) {
			graces = append(graces, c.v.rec.grace)
		}
	}
	gr, err := s.grant(ctx, ttl, graces)
	if err != nil {
		return nil, err
	}
	ok, err := s.writeTerms(ctx, cands, func(c *candidate) []clientv3.Op {
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
		// Some terms may be on the new leases: not remembering them makes
		// the next renewal bind them again.
		return nil, err
	}
	b := &batch{leases: gr, members: make(map[string]int64, len(ok))}
	for _, c := range cands {
		if ok[c.item.Key] {
			b.members[c.item.Key] = c.item.Epoch
		}
	}
	if len(b.members) == 0 {
		s.revokeUnused(ctx, gr)
		return ok, nil
	}
	s.batchMu.Lock()
	s.batches[owner] = append(s.batches[owner], b)
	s.batchMu.Unlock()
	return ok, nil
}

// forgetMember removes key from owner's batches once both of its keys left
// the batches' leases (a release deletes them, a new term re-puts them).
func (s *Store) forgetMember(owner, key string) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	for _, b := range s.batches[owner] {
		delete(b.members, key)
	}
}

// forgetBatchesOf forgets owner's batches that have key as a member: its
// grace key stays on their grace lease after a revocation, so they must
// never be kept alive again.
func (s *Store) forgetBatchesOf(owner, key string) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.batches[owner] = slices.DeleteFunc(s.batches[owner], func(b *batch) bool {
		_, member := b.members[key]
		return member
	})
}

// dropBatch forgets one of owner's batches.
func (s *Store) dropBatch(owner string, b *batch) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	s.batches[owner] = slices.DeleteFunc(s.batches[owner], func(x *batch) bool { return x == b })
}
