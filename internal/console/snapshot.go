package console

import (
	"slices"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/internal/leaseview"
	"github.com/tenure-dev/tenure/store"
)

// Snapshot is what the page draws: the whole picture at one moment. It is
// sent whole (the page updates its rows in place), so a client that missed
// one loses nothing.
type Snapshot struct {
	Version string `json:"version"`
	// Store is the store's URL without its password.
	Store string `json:"store"`
	// Owner is the owner id of the process serving the page, "" for
	// tenure console.
	Owner string `json:"owner,omitempty"`
	// At is when the store was read, in Unix milliseconds.
	At int64 `json:"at"`
	// Error is why the last read failed, at ErrorAt ("" when it did
	// not); the rest is then the last good read's, At included.
	Error    string    `json:"error,omitempty"`
	ErrorAt  int64     `json:"error_at,omitempty"`
	Actions  bool      `json:"actions"`
	Leases   []Lease   `json:"leases"`
	Pools    []Pool    `json:"pools"`
	Handoffs []Handoff `json:"handoffs"`
}

// Lease is one key's lease.
type Lease struct {
	Key     string `json:"key"`
	Owner   string `json:"owner"`
	Epoch   int64  `json:"epoch"`
	State   string `json:"state"` // held, released, expired, revoked
	Running bool   `json:"running"`
	// TimeLeftMs is the time to expiry on the store's clock, negative
	// after it. TTLMs is the longest time left seen in this term (a
	// renewal sets it to the TTL), GraceMs the grace after expiry.
	TimeLeftMs int64 `json:"time_left_ms"`
	TTLMs      int64 `json:"ttl_ms"`
	GraceMs    int64 `json:"grace_ms"`
	// Pool is the pool the key belongs to ("" for a singleton key).
	Pool    string `json:"pool,omitempty"`
	Paused  bool   `json:"paused,omitempty"`
	Cooling bool   `json:"cooling,omitempty"` // this process's runner kept failing it
	// Moving names the replica a move hands the key to ("*" for any),
	// while the holder it moves the key from still holds it.
	Moving string `json:"moving,omitempty"`

	// expiresAt is when the term expires by this read, Unix ms; movedFrom
	// the owner a move record takes the key from: what explains the
	// term's end at a later read.
	expiresAt int64
	movedFrom string
}

// Pool is one pool's workers.
type Pool struct {
	Name string `json:"name"`
	// Keys counts the pool's keys with a record in the store (a key
	// never taken has none).
	Keys    int      `json:"keys"`
	Workers []Worker `json:"workers"`
}

// Worker is one pool member.
type Worker struct {
	Owner  string  `json:"owner"`
	Weight float64 `json:"weight"`
	// MaxKeys is the most keys the worker holds (its --max), 0 for no
	// limit.
	MaxKeys int    `json:"max_keys"`
	State   string `json:"state"` // active, draining, released, expired, revoked
	Held    int    `json:"held"`
	// Share is the worker's fair share of the pool's keys by weight, Cap
	// its claim limit, as the balancer computes them (its default
	// Epsilon: share plus 10%, rounded up).
	Share float64 `json:"share"`
	Cap   int     `json:"cap"`
}

// build turns a listing into a snapshot's leases and pools. ttls is the
// longest time left seen per term, updated here.
func build(leases []store.Lease, at int64, grace time.Duration, ttls map[term]time.Duration, local localState) ([]Lease, []Pool) {
	v := leaseview.Classify(leases)
	paused := make(map[string]bool, len(v.Paused))
	for _, k := range v.Paused {
		paused[k] = true
	}
	moving := make(map[string]leaseview.Move, len(v.Moves))
	for _, m := range v.Moves {
		moving[m.Key] = m
	}
	seen := make(map[term]bool, len(v.Keys))
	out := make([]Lease, 0, len(v.Keys))
	keysOf := map[string]int{}
	for _, l := range v.Keys {
		t := term{l.Key, l.Epoch}
		seen[t] = true
		ttls[t] = max(ttls[t], l.TimeLeft)
		pool := poolOf(l.Key)
		if pool != "" {
			keysOf[pool]++
		}
		lv := Lease{
			Key: l.Key, Owner: l.Owner, Epoch: l.Epoch, State: leaseview.State(l), Running: l.Running,
			TimeLeftMs: l.TimeLeft.Milliseconds(), TTLMs: ttls[t].Milliseconds(), GraceMs: grace.Milliseconds(),
			Pool: pool, Paused: paused[l.Key] || local.paused[l.Key], Cooling: local.cooling[l.Key],
			expiresAt: at + l.TimeLeft.Milliseconds(),
		}
		if m, ok := moving[l.Key]; ok {
			lv.movedFrom = m.From
			if l.Owner == m.From && lv.State == "held" {
				lv.Moving = m.To
				if lv.Moving == "" {
					lv.Moving = "*"
				}
			}
		}
		out = append(out, lv)
	}
	for t := range ttls {
		if !seen[t] {
			delete(ttls, t)
		}
	}
	return out, pools(v.Workers, keysOf)
}

// pools groups the members by pool, with each active one's fair share:
// the balancer's, which counts active workers only.
func pools(workers []leaseview.Worker, keysOf map[string]int) []Pool {
	byName := map[string]*Pool{}
	var names []string
	for _, w := range workers {
		name := w.Prefix + w.Pool
		p := byName[name]
		if p == nil {
			p = &Pool{Name: name, Keys: keysOf[name]}
			byName[name] = p
			names = append(names, name)
		}
		p.Workers = append(p.Workers, Worker{Owner: w.Lease.Owner, Weight: w.Weight, MaxKeys: w.MaxKeys, State: w.State(), Held: w.Held})
	}
	slices.Sort(names)
	out := make([]Pool, 0, len(names))
	for _, name := range names {
		p := byName[name]
		var active []balance.Worker
		for _, w := range p.Workers {
			if w.State == "active" { // a draining worker's share is nothing: it hands its keys over
				active = append(active, balance.Worker{ID: w.Owner, Weight: w.Weight, MaxKeys: w.MaxKeys})
			}
		}
		// The balancer's default Epsilon, and each worker's --max from its
		// membership.
		shares := balance.Shares(balance.Config{}, active, p.Keys)
		for i, w := range p.Workers {
			if sh, ok := shares[w.Owner]; ok && w.State == "active" {
				p.Workers[i].Share, p.Workers[i].Cap = sh.Fair, sh.Cap
			}
		}
		out = append(out, *p)
	}
	return out
}

// term is one key's term.
type term struct {
	key   string
	epoch int64
}

// poolOf is the pool a lease key belongs to, "" for a singleton key.
func poolOf(key string) string {
	prefix, pool, _, ok := poolkey.ParseKey(key)
	if !ok {
		return ""
	}
	return prefix + pool
}

// localState is what the process serving the page knows beyond the store.
type localState struct {
	owner   string
	paused  map[string]bool
	cooling map[string]bool
}
