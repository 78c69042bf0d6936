package etcd

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
)

// Renew extends every listed term of owner. Terms this store put on a
// session of this TTL are renewed by the session: one TimeToLive that
// lists the keys still on its lease, one keep-alive, whatever the number
// of terms. Any other term (acquired by another store, moved off its
// session, on a session of another TTL) is read, and if current, moved
// onto the owner's session.
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
	ttlSecs := s.ttlSeconds(ttl)
	bySession, rest := s.planRenewal(owner, ttlSecs, items)
	var mu sync.Mutex
	answer := func(idx []int, ok []bool) {
		mu.Lock()
		defer mu.Unlock()
		for j, i := range idx {
			renewed[i] = ok[j]
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for sess, idx := range bySession {
		g.Go(func() error {
			ok, err := s.renewSession(gctx, owner, sess, items, idx)
			if err == nil {
				answer(idx, ok)
			}
			return err
		})
	}
	if len(rest) > 0 {
		g.Go(func() error {
			ok, err := s.renewByReading(gctx, owner, ttlSecs, items, rest)
			if err == nil {
				answer(rest, ok)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, s.wrap("renew", err)
	}
	return renewed, nil
}

// planRenewal splits items into those whose term is a member of one of
// owner's sessions of ttl seconds, by session, and the rest.
func (s *Store) planRenewal(owner string, ttl int64, items []store.RenewItem) (map[*session][]int, []int) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	bySession := map[*session][]int{}
	var rest []int
	for i, it := range items {
		found := false
		for id, sess := range s.sessions {
			if id.owner != owner || id.ttl != ttl {
				continue
			}
			if m, ok := sess.members[it.Key]; ok && m.epoch == it.Epoch {
				bySession[sess] = append(bySession[sess], i)
				found = true
				break
			}
		}
		if !found {
			rest = append(rest, i)
		}
	}
	return bySession, rest
}

// renewSession renews the items idx, members of sess, by renewing the
// session: first a TimeToLive listing the keys on its lease, then a
// keep-alive. A member still on the lease then was on it at the
// keep-alive too, unless a revocation or an eviction moved it off in
// between — and those keep peers out until a full TTL + grace after they
// happened, past any deadline this renewal promises. The session's live
// part ending (time left ≤ its grace) loses every term on it.
func (s *Store) renewSession(ctx context.Context, owner string, sess *session, items []store.RenewItem, idx []int) ([]bool, error) {
	ok := make([]bool, len(idx))
	left, err := s.client.TimeToLive(ctx, sess.lease, clientv3.WithAttachedKeys())
	if err != nil {
		return nil, err
	}
	// TTL is rounded down, so it is at least the grace exactly while the
	// live part lasts (-1 once the lease is gone).
	if left.TTL < sess.id.grace {
		s.dropSession(sess)
		return ok, nil
	}
	sent := time.Now()
	alive, err := s.keepAlive(ctx, sess)
	if err != nil || !alive {
		return ok, err
	}
	s.renewed(sess, sent)
	on := make(map[string]bool, len(left.Keys))
	for _, k := range left.Keys {
		if key, kind, good := s.splitKey(k); good && kind == kindLive {
			on[key] = true
		}
	}
	listed := make(map[string]bool, len(idx))
	var changed []int
	var terms []term // of the changed items
	flipped := map[string]bool{}
	s.sessMu.Lock()
	for j, i := range idx {
		it := items[i]
		listed[it.Key] = true
		m, member := sess.members[it.Key]
		ok[j] = on[it.Key] && member && m.epoch == it.Epoch
		if !on[it.Key] {
			delete(sess.members, it.Key)
		}
		// A key listed twice is written once: etcd refuses a
		// transaction that puts one key twice.
		if ok[j] && m.running != it.Running && !flipped[it.Key] {
			flipped[it.Key] = true
			changed = append(changed, j)
			terms = append(terms, term{key: it.Key, epoch: it.Epoch, implicit: m.implicit})
		}
	}
	stale, staleMembers := sess.unlisted(on, listed, time.Now())
	s.sessMu.Unlock()
	if len(changed) > 0 {
		if err := s.writeRunning(ctx, owner, sess, items, idx, changed, terms, ok); err != nil {
			return nil, err
		}
	}
	if len(stale) > 0 {
		s.evict(ctx, sess, owner, stale, staleMembers, left.ResponseHeader.Revision)
	}
	return ok, nil
}

// writeRunning records the changed running flags of the renewed items
// idx[changed], whose terms are terms[n]; a term whose live key changed
// meanwhile is lost.
func (s *Store) writeRunning(ctx context.Context, owner string, sess *session, items []store.RenewItem, idx, changed []int, terms []term, ok []bool) error {
	written, err := s.writeTerms(ctx, owner, terms, func(n int) []clientv3.Op {
		t := terms[n]
		rec := record{epoch: t.epoch, implicit: t.implicit, owner: owner, state: stateHeld, running: items[idx[changed[n]]].Running, grace: sess.id.grace}
		return []clientv3.Op{clientv3.OpPut(s.recordKey(t.key), rec.encode())}
	})
	if err != nil {
		return err
	}
	for n, j := range changed {
		it := items[idx[j]]
		ok[j] = written[n]
		if written[n] {
			s.join(sess, it.Key, member{epoch: it.Epoch, running: it.Running, implicit: terms[n].implicit})
		}
	}
	return nil
}

// renewByReading renews the items idx that are not members of a session:
// one read of their keys; then each current term, its live part not
// over, is moved onto owner's session for its grace, kept alive first so
// that it ends no earlier than this call's start + ttl + grace.
func (s *Store) renewByReading(ctx context.Context, owner string, ttl int64, items []store.RenewItem, idx []int) ([]bool, error) {
	var keys []string
	seen := make(map[string]bool, len(idx))
	for _, i := range idx {
		if !seen[items[i].Key] {
			seen[items[i].Key] = true
			keys = append(keys, items[i].Key)
		}
	}
	views, err := s.readKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	// At most one term of a key is current; an item repeating it gets the
	// same answer.
	current := map[string]*view{}
	var cands []int
	for _, i := range idx {
		it := items[i]
		if v := views[it.Key]; current[it.Key] == nil && v != nil && v.current(owner, it.Epoch) {
			current[it.Key] = v
			cands = append(cands, i)
		}
	}
	if cands, err = s.withLivePart(ctx, items, cands, current); err != nil {
		return nil, err
	}
	byGrace := map[int64][]int{}
	for _, i := range cands {
		g := current[items[i].Key].rec.grace
		byGrace[g] = append(byGrace[g], i)
	}
	var mu sync.Mutex
	bound := map[string]bool{}
	g, gctx := errgroup.WithContext(ctx)
	for grace, group := range byGrace {
		g.Go(func() error {
			ok, err := s.bind(gctx, owner, ttl, grace, items, group, current)
			mu.Lock()
			defer mu.Unlock()
			for n, i := range group {
				bound[items[i].Key] = err == nil && ok[n]
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ok := make([]bool, len(idx))
	for j, i := range idx {
		v := current[items[i].Key]
		ok[j] = v != nil && v.rec.epoch == items[i].Epoch && bound[items[i].Key]
	}
	return ok, nil
}

// withLivePart keeps the candidates whose live part is not over. A term's
// live key on a session stays through the grace, so its session must
// have at least the grace left (in whole seconds rounded down); a term from before sessions has a grace
// key, and its live key ends with its live part.
func (s *Store) withLivePart(ctx context.Context, items []store.RenewItem, cands []int, current map[string]*view) ([]int, error) {
	var ids []clientv3.LeaseID
	for _, i := range cands {
		v := current[items[i].Key]
		if id := clientv3.LeaseID(v.live.Lease); v.grace == nil && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	left, err := s.timesToLive(ctx, ids)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(cands, func(i int) bool {
		v := current[items[i].Key]
		return v.grace == nil && left[clientv3.LeaseID(v.live.Lease)] < v.rec.grace
	}), nil
}

// bind moves the current terms items[group], all of one grace, onto
// owner's session for ttl and that grace.
func (s *Store) bind(ctx context.Context, owner string, ttl, grace int64, items []store.RenewItem, group []int, current map[string]*view) ([]bool, error) {
	sess, err := s.liveSession(ctx, owner, ttl, grace, true)
	if err != nil {
		return nil, err
	}
	terms := make([]term, len(group))
	for n, i := range group {
		terms[n] = term{key: items[i].Key, epoch: items[i].Epoch, implicit: current[items[i].Key].rec.implicit}
		s.forget(owner, items[i].Key)
	}
	ok, err := s.writeTerms(ctx, owner, terms, func(n int) []clientv3.Op {
		it := items[group[n]]
		v := current[it.Key]
		ops := []clientv3.Op{
			clientv3.OpPut(s.liveKey(it.Key), string(v.live.Value), clientv3.WithLease(sess.lease)),
			clientv3.OpDelete(s.graceKey(it.Key)),
		}
		if it.Running != v.rec.running {
			rec := *v.rec
			rec.running = it.Running
			ops = append(ops, clientv3.OpPut(s.recordKey(it.Key), rec.encode()))
		}
		return ops
	})
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The session ended between its keep-alive and the write:
			// the next renewal starts a new one.
			s.dropSession(sess)
		}
		return nil, err
	}
	for n, i := range group {
		if ok[n] {
			s.join(sess, items[i].Key, member{epoch: items[i].Epoch, running: items[i].Running, implicit: terms[n].implicit})
		}
	}
	return ok, nil
}

// termHolds compares key's live key, and for an implicit term its record,
// with term t of owner. An implicit term's record must still be the one
// its claim created: a put of a record deleted meanwhile would create
// another, whose create revision would name another epoch.
func (s *Store) termHolds(t term, owner string) []clientv3.Cmp {
	cmps := s.liveHolds(t, owner)
	if t.implicit {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.recordKey(t.key)), "=", t.epoch))
	}
	return cmps
}

// writeTerms runs ops(n) for every term whose live key still holds it,
// each in a nested transaction of its own, the terms in transactions of
// writeChunk, in flight together. It reports which were written.
func (s *Store) writeTerms(ctx context.Context, owner string, terms []term, ops func(n int) []clientv3.Op) ([]bool, error) {
	ok := make([]bool, len(terms))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for from := 0; from < len(terms); from += s.writeChunk {
		to := min(from+s.writeChunk, len(terms))
		g.Go(func() error {
			nested := make([]clientv3.Op, 0, to-from)
			for n := from; n < to; n++ {
				nested = append(nested, clientv3.OpTxn(s.termHolds(terms[n], owner), ops(n), nil))
			}
			resp, err := s.client.Txn(gctx).Then(nested...).Commit()
			if err != nil {
				return err
			}
			for j, r := range resp.Responses {
				ok[from+j] = r.GetResponseTxn().GetSucceeded()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
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
	// Before the write: a renewal racing it must not take the key's
	// presence on a session for the term.
	for _, t := range terms {
		s.forget(owner, t.Key)
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
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, ts := range chunks {
		g.Go(func() error {
			nested := make([]clientv3.Op, len(ts))
			for j, t := range ts {
				rec := record{epoch: t.Epoch, owner: owner, state: stateReleased}
				ops := []clientv3.Op{
					clientv3.OpPut(s.recordKey(t.Key), rec.encode()),
					clientv3.OpDelete(s.liveKey(t.Key)),
					clientv3.OpDelete(s.graceKey(t.Key)),
				}
				// The term is held in one of two forms (record.go), and
				// etcd compares have no "or": the second form is tried
				// in the first's else.
				explicit, implicit := term{key: t.Key, epoch: t.Epoch}, term{key: t.Key, epoch: t.Epoch, implicit: true}
				nested[j] = clientv3.OpTxn(s.recordHolds(explicit, owner), ops,
					[]clientv3.Op{clientv3.OpTxn(s.recordHolds(implicit, owner), ops, nil)})
			}
			_, err := s.client.Txn(gctx).Then(nested...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		// A term left on its session is renewed again once a renewal
		// lists it (by a read), or moved off the session if none does.
		return s.wrap("release", err)
	}
	return nil
}
