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

// Abandoned is what the abandon faults showed: how soon after the last
// call naming an abandoned term a peer ran its key.
type Abandoned struct {
	Latency
	// Renewed counts the terms checked that had been renewed before they
	// were abandoned: on a store with sessions, terms that were on their
	// holder's session. A term abandoned before its first renewal is on
	// its own record and shows less.
	Renewed int `json:"renewed"`
	// Excused counts the abandoned terms not checked: another fault may
	// have kept the peers from the key, or the run ended first.
	Excused int `json:"excused"`
}

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
	a := &c.rep.Abandoned
	a.Bound = bound
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
		if due >= c.m.end || c.stretched(e.Key, r, last, due) {
			a.Excused++
			continue
		}
		ivs := c.m.intervals[e.Key]
		next := slices.IndexFunc(ivs, func(iv *interval) bool { return iv.r != r && iv.end > e.Sent })
		if next >= 0 && ivs[next].start <= e.Sent {
			continue // a peer ran the key already: the term had ended
		}
		c.checked(InvAbandoned, 1)
		if t.renewed {
			a.Renewed++
		}
		if next < 0 {
			c.violate(InvAbandoned, due, e.Key, r.name, 0,
				"nobody ran the key after %s abandoned epoch %d (bound %v)", r.name, e.Epoch, bound)
			continue
		}
		d := time.Duration(ivs[next].start - last)
		lat = append(lat, d)
		if d > bound {
			c.violate(InvAbandoned, ivs[next].start, e.Key, ivs[next].r.name, d-bound,
				"%s ran the key %v after %s's last call naming epoch %d, which it abandoned (bound %v)%s",
				ivs[next].r.name, d, r.name, e.Epoch, bound, c.trail(e.Key, r, last, ivs[next].start))
		}
	}
	a.set(lat)
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

// stretched reports whether a fault during [from, to] may have kept the
// peers from key, abandoned by r: one aimed at every replica or at the
// store; another replica's abandon of the same key (it claims the key no
// more, and may be the only peer left); a fault on a replica that
// acquired key meanwhile (killed or frozen holding it before its runner
// started); or faults on every peer that lived through the window. A
// fault on a bystander, while a peer is free to take the key, excuses
// nothing.
func (c *checker) stretched(key string, r *replicaInfo, from, to int64) bool {
	hit := map[string]bool{} // replicas a fault was aimed at meanwhile
	for _, f := range c.m.faults {
		switch {
		case f.from > to || f.to < from:
			continue
		case f.kind == FaultAbandon && (f.target == r.name || f.key != key):
			continue // r's own, or another key's: its target may still take key
		case f.kind == FaultAbandon, f.target == "*", f.kind == FaultStoreRestart:
			return true
		}
		hit[f.target] = true
		if f.peer != "" {
			hit[f.peer] = true
		}
	}
	free := false
	for name, p := range c.m.replicas {
		switch {
		case p == r:
		case hit[name] && c.acquired(p, key, from, to):
			return true
		case !hit[name] && p.spawned <= from && (p.exit == 0 || p.exit >= to):
			free = true
		}
	}
	return !free
}

// acquired reports whether p was granted key (or may have been: the reply
// was lost) by an Acquire sent during [from, to].
func (c *checker) acquired(p *replicaInfo, key string, from, to int64) bool {
	return slices.ContainsFunc(p.calls, func(e Event) bool {
		return e.Ev == evAcquire && e.Key == key && e.Sent >= from && e.Sent <= to &&
			(e.Outcome == outOK || e.Outcome == outCommit)
	})
}
