package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
)

// candidate is a renewal item whose term the read found current.
type candidate struct {
	item store.RenewItem
	v    *view
}

// Renew extends every listed term of owner: one read of the listed keys;
// then a keep-alive of each pair of leases that an earlier renewal bound
// exactly these terms to, and one write that binds the remaining current
// terms to a pair granted now (see batch.go).
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
		if ok, err = s.renewCurrent(ctx, owner, s.ttlSeconds(ttl), cands, order); err != nil {
			return nil, s.wrap("renew", err)
		}
	}
	for i, it := range items {
		c := cands[it.Key]
		renewed[i] = c != nil && c.item.Epoch == it.Epoch && ok[it.Key]
	}
	return renewed, nil
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
