package chaos

import (
	"slices"
	"time"
)

// InvAbandoned: a term its holder stops renewing, without releasing it,
// ends on the store on its own, however long the holder goes on renewing
// its other terms, and a peer runs the key within the bound after the
// last call that named the term. The abandon fault (abandon.go) makes
// such terms; a store that keeps a process's terms alive together (a
// session per process) and does not take an unlisted one off fails here.
const InvAbandoned = "an abandoned term ends"

// abandonBound is how soon after the last call naming an abandoned term
// a peer must run its key: the takeover bound of a crash. On etcd a
// renewal evicts a term from its session only once no renewal listed it
// for a whole TTL, and then keeps peers out for TTL + grace more, in
// whole seconds (store/etcd's doc).
func (c *checker) abandonBound() time.Duration {
	b := c.takeoverBound()
	if c.rep.History.Kind == kindEtcd {
		b += c.t.TTL + c.t.RenewEvery + time.Second
	}
	return b
}

// abandons checks InvAbandoned for every term the abandon fault left out.
// A term released meanwhile, one whose key a peer already ran, and one
// whose wait another fault may have stretched (a kill, a partition, a
// store restart) are not checked.
func (c *checker) abandons() {
	bound := c.abandonBound()
	c.rep.Abandoned.Bound = bound
	var lat []time.Duration
	seen := map[termID]bool{}
	for _, e := range c.m.abandons {
		id := termID{e.Key, e.Epoch}
		t := c.m.term(e.Key, e.Epoch)
		r := c.m.replicas[e.Replica]
		if seen[id] || t == nil || r == nil || t.released {
			continue
		}
		seen[id] = true
		last := t.lastListed
		due := last + int64(bound)
		if c.stretched(e.Key, r, last, due) {
			continue
		}
		ivs := c.m.intervals[e.Key]
		next := slices.IndexFunc(ivs, func(iv *interval) bool { return iv.r != r && iv.end > e.Sent })
		if next >= 0 && ivs[next].start <= e.Sent {
			continue // a peer ran the key already: the term had ended
		}
		if next < 0 {
			if due < c.m.end {
				c.checked(InvAbandoned, 1)
				c.violate(InvAbandoned, due, e.Key, r.name, 0,
					"nobody ran the key after %s abandoned epoch %d (bound %v)", r.name, e.Epoch, bound)
			}
			continue
		}
		c.checked(InvAbandoned, 1)
		d := time.Duration(ivs[next].start - last)
		lat = append(lat, d)
		if d > bound {
			c.violate(InvAbandoned, ivs[next].start, e.Key, ivs[next].r.name, d-bound,
				"%s ran the key %v after %s's last call naming epoch %d, which it abandoned (bound %v)",
				ivs[next].r.name, d, r.name, e.Epoch, bound)
		}
	}
	c.rep.Abandoned.set(lat)
}

// termID names one term.
type termID struct {
	key   string
	epoch int64
}

// term finds the term of key with epoch, or nil.
func (m *model) term(key string, epoch int64) *term {
	i := slices.IndexFunc(m.terms[key], func(t *term) bool { return t.epoch == epoch })
	if i < 0 {
		return nil
	}
	return m.terms[key][i]
}

// stretched reports whether a fault may have stretched the wait for a peer
// to run key, abandoned by r, at any moment of [from, to]: any fault but
// r's own abandon and the abandons of other keys (another replica leaving
// key out claims it no more, and may be the only peer left).
func (c *checker) stretched(key string, r *replicaInfo, from, to int64) bool {
	return slices.ContainsFunc(c.m.faults, func(f faultWindow) bool {
		if f.kind == FaultAbandon && (f.target == r.name || f.key != key) {
			return false
		}
		return f.from <= to && f.to >= from
	})
}
