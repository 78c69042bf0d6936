// Package poolcoord is a pool's coordinator: the part of the engine that
// decides which of a pool's keys this worker claims and which it gives
// back. It owns the pool's key set, its layout in the lease table (through
// package poolkey) and its balance policy; it makes no store call and
// starts nothing. Each round the engine hands it the holder's view of the
// lease table and gets back the lease keys to claim and to release; the
// engine acquires, runs, stops and releases them like any other key.
//
// The pool simulator (internal/harness/poolsim) runs whole supervisors, so
// its tables describe the engine that ships.
package poolcoord

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// Config describes one worker's membership in one pool.
type Config struct {
	// Prefix is the namespace every lease key lives under (Config.Prefix).
	Prefix string
	// Pool is the pool's name, already validated.
	Pool string
	// Self is this worker's owner id, as the store sees it.
	Self string
	// Weight is this worker's finite positive weight.
	Weight float64
	// MaxKeys is the most keys this worker holds, 0 for no limit. It goes
	// into the membership key with the weight, so that every worker
	// plans with each worker's own limit.
	MaxKeys int
	// NameOf maps an owner id to the name its key preferences are hashed
	// from, so a restarted worker is preferred for the keys it had.
	// Default: the id itself.
	NameOf func(owner string) string
	// Policy plans each round.
	Policy balance.Policy
}

// Coordinator is one pool as one worker coordinates it. It is not safe for
// concurrent use: the engine calls it under its own lock.
type Coordinator struct {
	cfg           Config
	keysPrefix    string
	membersPrefix string
	memberKey     string

	keys    []string             // latest from the source, without repeats; nil until first loaded
	index   *Index               // of keys; nil until first loaded
	owners  []int32              // the last plan's View.Owners.Of, reused by the next
	numbers balance.OwnerNumbers // of the last plan's owners: View.Owners.IDs
	held    int                  // how many keys the last plan's View.HeldSince had
	dups    int                  // keys the source listed more than once, last time
	lastErr error

	plan     balance.Plan
	badPeers map[string]bool // membership keys already reported malformed
}

// New returns the coordinator of cfg, or an error if this worker's
// membership key cannot be stored.
func New(cfg Config) (*Coordinator, error) {
	if cfg.NameOf == nil {
		cfg.NameOf = func(owner string) string { return owner }
	}
	member := poolkey.Member{Prefix: cfg.Prefix, Pool: cfg.Pool, Owner: cfg.Self, Weight: cfg.Weight, MaxKeys: cfg.MaxKeys}.Key()
	if err := store.ValidateKey(member); err != nil {
		return nil, fmt.Errorf("owner id too long for a membership key: %w", err)
	}
	return &Coordinator{
		cfg:           cfg,
		keysPrefix:    poolkey.KeysPrefix(cfg.Prefix, cfg.Pool),
		membersPrefix: poolkey.MembersPrefix(cfg.Prefix, cfg.Pool),
		memberKey:     member,
		badPeers:      make(map[string]bool),
	}, nil
}

// MemberKey is this worker's membership lease key: held like any other
// lease, its running flag saying the worker is not draining.
func (c *Coordinator) MemberKey() string { return c.memberKey }

// LeaseKey is the lease key of the pool's key k.
func (c *Coordinator) LeaseKey(k string) string { return c.keysPrefix + k }

// PoolKey is the source's key leased as leaseKey, if it is one of the
// pool's current keys.
func (c *Coordinator) PoolKey(leaseKey string) (string, bool) {
	k, ok := c.poolKey(leaseKey)
	if !ok {
		return "", false
	}
	_, listed := c.index.Find(k)
	return k, listed
}

func (c *Coordinator) poolKey(leaseKey string) (string, bool) {
	return strings.CutPrefix(leaseKey, c.keysPrefix)
}

func (c *Coordinator) isMember(leaseKey string) bool {
	return strings.HasPrefix(leaseKey, c.membersPrefix)
}

// Concerns reports whether a change to leaseKey can change this pool's
// plan: it is one of its current keys or a membership.
func (c *Coordinator) Concerns(leaseKey string) bool {
	_, ok := c.PoolKey(leaseKey)
	return ok || c.isMember(leaseKey)
}

// Wants reports whether leaseKey is one of the pool's keys the source
// still lists; a key that left the source is stopped and released.
func (c *Coordinator) Wants(leaseKey string) bool {
	_, ok := c.PoolKey(leaseKey)
	return ok
}

// Loaded reports whether the source has been read successfully once.
func (c *Coordinator) Loaded() bool { return c.keys != nil }

// SetKeys replaces the pool's keys with a fresh read of its source. Each
// key is validated, also as leased in the pool's namespace, and repeats
// are dropped, keeping the first: a key listed twice would otherwise be
// planned twice and bounce between workers forever. On error the previous
// set stays in force. newDups reports a change in how many repeats the
// source lists, worth a warning.
func (c *Coordinator) SetKeys(keys []string) (dups int, newDups bool, err error) {
	if c.index != nil && slices.Equal(keys, c.keys) {
		// The same keys as last time, without a repeat, as most reads
		// list: valid already, and the index (by which the holder's view
		// keeps them) and the policy's ranking stay as they are.
		c.dups, c.lastErr = 0, nil
		return 0, false, nil
	}
	index := newIndex(c.keysPrefix, len(keys))
	for _, k := range keys {
		if err := store.ValidateKey(k); err != nil {
			c.lastErr = err
			return 0, false, err
		}
		if err := store.ValidateKey(c.LeaseKey(k)); err != nil {
			err = fmt.Errorf("key %q of pool %s is too long once in the pool's namespace: %w", k, c.cfg.Pool, err)
			c.lastErr = err
			return 0, false, err
		}
		if !index.add(k) {
			dups++
		}
	}
	newDups = dups > 0 && dups != c.dups
	if c.index != nil && slices.Equal(index.keys, c.index.keys) {
		index = c.index // the same keys, listed with repeats
	}
	c.keys, c.index, c.dups, c.lastErr = index.keys, index, dups, nil
	return dups, newDups, nil
}

// Index is the pool's keys as the last successful SetKeys indexed them,
// or nil before the first.
func (c *Coordinator) Index() *Index { return c.index }

// SourceFailed records a failed read of the source; the last good key set
// stays in force.
func (c *Coordinator) SourceFailed(err error) { c.lastErr = err }

// Source is how many keys the last good read of the source listed, and
// why the latest read failed, if it did.
func (c *Coordinator) Source() (keys int, err error) { return len(c.keys), c.lastErr }

// Entry is one lease as the holder sees it: a live lease, or one whose
// holder's term ended less than grace ago (still blocked for everyone
// else), with the owner's running flag. Its key is Key; or, when Index is
// not nil, the key at position At of Index, a pool's keys as a
// coordinator indexed them: the view the holder keeps of a pool's keys is
// by position, and names them so without making a string.
type Entry struct {
	Key           string
	Index         *Index
	At            int
	Owner         string
	Live, Running bool
}

// position is where e's key is among the pool's current keys, if it is
// one of them.
func (c *Coordinator) position(e Entry) (int, bool) {
	switch {
	case e.Index == c.index && e.Index != nil:
		return e.At, true
	case e.Index != nil:
		// Another pool's, or an index this pool has replaced since.
		if e.Index.prefix != c.keysPrefix {
			return 0, false
		}
		return c.index.Find(e.Index.keys[e.At])
	}
	k, ok := c.poolKey(e.Key)
	if !ok {
		return 0, false
	}
	return c.index.Find(k)
}

// Self is this worker's own standing in the pool this round.
type Self struct {
	// Member: it holds its membership lease.
	Member bool
	// Settled: it has held membership for a round, so it has seen the
	// peers that started with it. It claims nothing before.
	Settled bool
	// HeldSince says when this worker acquired a key it holds.
	HeldSince func(leaseKey string) (time.Time, bool)
}

// Round is what the engine does for the pool this round.
type Round struct {
	// Claim and Release are lease keys, best first.
	Claim, Release []string
	// Recheck, when not zero, is when to plan again before the next round.
	Recheck time.Time
	// Malformed are membership keys first seen this round whose weight
	// cannot be read: the peer is ignored; the engine logs each once.
	Malformed []string
}

// Planning is a round's plan being made: Begin starts it, Observe reads
// each entry of the lease table into it, Finish plans. The engine plans
// all its pools from one pass over its view of the table, which holds
// every key of every pool: a pass per pool was as many scans, each under
// the locks a renewal and a run's watchdog wait for.
type Planning struct {
	c    *Coordinator
	self Self
	view balance.View
	out  Round
}

// Begin starts the round's plan, or returns nil before the source's keys
// are loaded (nothing to plan).
func (c *Coordinator) Begin(now time.Time, self Self) *Planning {
	if c.keys == nil {
		return nil
	}
	if len(c.owners) != len(c.keys) {
		c.owners = make([]int32, len(c.keys))
	}
	clear(c.owners)
	c.numbers.Reset()
	return &Planning{c: c, self: self,
		view: balance.View{Self: c.cfg.Self, Now: now, Keys: c.keys,
			// Made at the size it had last time: grown from empty, a plan of
			// 10,000 held keys allocated twice what it kept.
			HeldSince: make(map[string]time.Time, c.held)}}
}

// Observe reads one entry of the lease table; one of another pool, or of
// no pool, changes nothing.
//
// A key whose holder crashed is still blocked during grace: counting it
// as owned keeps the first worker around from taking keys it does not
// prefer before their preferred worker can.
func (p *Planning) Observe(e Entry) {
	c := p.c
	if e.Index == nil && c.isMember(e.Key) {
		if e.Live {
			c.addWorker(&p.view, &p.out, e, p.self.Member)
		}
	} else if i, listed := c.position(e); listed {
		c.owners[i] = c.numbers.Number(e.Owner)
	}
}

// Finish plans the round from what was observed.
func (p *Planning) Finish() Round {
	c, view, out := p.c, p.view, p.out
	self := c.numbers.Number(c.cfg.Self)
	view.Owners = balance.Owners{Of: c.owners, IDs: c.numbers.IDs()}
	for i, owner := range c.owners {
		if owner != self || p.self.HeldSince == nil {
			continue
		}
		if t, ok := p.self.HeldSince(c.LeaseKey(c.keys[i])); ok {
			view.HeldSince[c.keys[i]] = t
		}
	}
	c.held = len(view.HeldSince)
	c.plan = balance.Plan{}
	if p.self.Settled {
		c.plan = c.cfg.Policy.Plan(view)
	}
	out.Recheck = c.plan.Recheck
	for _, k := range c.plan.Claim {
		out.Claim = append(out.Claim, c.LeaseKey(k))
	}
	for _, k := range c.plan.Release {
		out.Release = append(out.Release, c.LeaseKey(k))
	}
	return out
}

// addWorker adds a live membership to the view, or reports it malformed.
// This worker drains once it no longer holds its own membership; a peer
// drains when its membership's running flag is off.
func (c *Coordinator) addWorker(view *balance.View, out *Round, e Entry, member bool) {
	m, err := poolkey.ParseMember(e.Key)
	if err != nil || m.Owner != e.Owner {
		if !c.badPeers[e.Key] {
			c.badPeers[e.Key] = true
			out.Malformed = append(out.Malformed, e.Key)
		}
		return
	}
	w := balance.Worker{ID: e.Owner, Name: c.cfg.NameOf(e.Owner), Weight: m.Weight, MaxKeys: m.MaxKeys, Draining: !e.Running}
	if e.Owner == c.cfg.Self {
		w.Draining = !member
	}
	view.Workers = append(view.Workers, w)
}

// Status is the pool as this worker last saw it.
type Status struct {
	Name    string
	Keys    int
	Held    int
	Target  int
	Cap     int
	Workers map[string]int // live worker → keys it holds
	Error   error          // the last failed read of the source, if the latest failed
}

// Status counts the pool's keys per live worker in the table.
func (c *Coordinator) Status(table iter.Seq[Entry]) Status {
	st := Status{Name: c.cfg.Pool, Keys: len(c.keys), Target: c.plan.Target, Cap: c.plan.Cap, Workers: map[string]int{}, Error: c.lastErr}
	for e := range table {
		if e.Index == nil && c.isMember(e.Key) {
			if m, err := poolkey.ParseMember(e.Key); err == nil && m.Owner == e.Owner {
				st.Workers[e.Owner] += 0
			}
		} else if _, ok := c.position(e); ok {
			st.Workers[e.Owner]++
			if e.Owner == c.cfg.Self {
				st.Held++
			}
		}
	}
	return st
}
