package etcd

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/store"
)

// listPage is how many etcd keys (three per lease at most) one List read
// returns; further pages are read at the first page's revision, so a List
// is one consistent snapshot.
const listPage = 15000

// List returns every record whose key starts with prefix (byte-exact),
// sorted by key. Liveness and time left come from the server's leases: one
// TimeToLive per distinct lease, and terms renewed together share theirs,
// so a namespace of 10,000 leases held by a few owners costs a few calls.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	vs, err := s.readViews(ctx, prefix)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	leases, err := s.leases(ctx, vs)
	if err != nil {
		return nil, s.wrap("list", err)
	}
	return leases, nil
}

// readViews reads the views of every record whose key starts with prefix,
// in pages at one revision.
func (s *Store) readViews(ctx context.Context, prefix string) ([]*view, error) {
	from := s.root + prefix
	end := clientv3.GetPrefixRangeEnd(from)
	var (
		vs  []*view
		rev int64
	)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.client.Get(ctx, from, opts...)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if vs, err = s.views(resp.Kvs, vs); err != nil {
			return nil, err
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	// A prefix may end inside the "\x00r" suffix ("k\x00"); keys without a
	// record are lease keys someone else wrote.
	kept := vs[:0]
	for _, v := range vs {
		if v.rec != nil && strings.HasPrefix(v.key, prefix) {
			kept = append(kept, v)
		}
	}
	return kept, nil
}

// leases turns views into Leases, asking the server for the time left of
// each distinct lease they need: the live lease of a held term, or, once
// that is gone, the grace lease, which ends exactly the term's grace after
// the live lease would have.
func (s *Store) leases(ctx context.Context, vs []*view) ([]store.Lease, error) {
	need := map[clientv3.LeaseID]bool{}
	var ids []clientv3.LeaseID
	for _, v := range vs {
		if id, ok := clockLease(v); ok && !need[id] {
			need[id] = true
			ids = append(ids, id)
		}
	}
	left, err := s.timesToLive(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]store.Lease, 0, len(vs))
	for _, v := range vs {
		out = append(out, lease(v, left))
	}
	return out, nil
}

// clockLease is the lease whose time left tells v's expiry.
func clockLease(v *view) (clientv3.LeaseID, bool) {
	switch {
	case v.rec == nil || v.rec.state == stateReleased:
		return 0, false
	case v.live != nil && v.rec.state == stateHeld:
		return clientv3.LeaseID(v.live.Lease), true
	case v.grace != nil:
		return clientv3.LeaseID(v.grace.Lease), true
	}
	return 0, false
}

// lease builds v's Lease from the remaining TTLs of its leases, in whole
// seconds as etcd reports them (rounded down): the time left is taken as
// the middle of that second, within half a second of the truth.
func lease(v *view, ttls map[clientv3.LeaseID]int64) store.Lease {
	r := v.rec
	l := store.Lease{
		Key:      v.key,
		Owner:    r.owner,
		Epoch:    r.epoch,
		Released: r.state == stateReleased,
		Running:  r.running,
	}
	grace := time.Duration(r.grace) * time.Second
	id, ok := clockLease(v)
	ttl := ttls[id]
	switch {
	case !ok:
		// Released (the expiry is the moment of release, which etcd does
		// not date), or past its grace: it ended at least grace ago.
		if !l.Released {
			l.TimeLeft = -grace
		}
	case v.live != nil && r.state == stateHeld && v.grace == nil:
		// On a session, whose lease lasts ttl + grace: the live part is
		// over once less than the grace is left (ttl is rounded down).
		switch {
		case ttl >= r.grace:
			l.Live = true
			l.TimeLeft = middle(ttl) - grace
		case ttl >= 0:
			l.TimeLeft = min(middle(ttl)-grace, 0)
		default:
			l.TimeLeft = -grace
		}
	case v.live != nil && r.state == stateHeld:
		// A term from before sessions: its live lease lasts ttl.
		if ttl >= 0 {
			l.Live = true
			l.TimeLeft = middle(ttl)
		}
	case ttl >= 0:
		l.TimeLeft = min(middle(ttl)-grace, 0)
	default:
		l.TimeLeft = -grace
	}
	return l
}

// middle is the middle of the second a remaining TTL of whole seconds names.
func middle(ttl int64) time.Duration {
	return time.Duration(ttl)*time.Second + time.Second/2
}
