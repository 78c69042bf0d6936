package balance

import (
	"slices"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/shrink"
)

// Worker is a live member of the pool.
type Worker struct {
	ID string
	// Name is what the worker's key preferences are hashed from: its
	// configured name, stable across restarts, so a restarted worker is
	// preferred for the same keys as before. Default ID. Workers sharing a
	// name prefer the same keys; the lower ID wins each tie.
	Name   string
	Weight float64 // > 0; 1 is the norm
	// MaxKeys is the most keys the worker holds, as it published it; 0
	// means no limit. A share above it goes to the other workers.
	MaxKeys int
	// Draining workers are stopping: they get no keys and hand theirs back.
	Draining bool
}

// View is one worker's snapshot of the pool at the start of a round.
type View struct {
	Self string
	Now  time.Time
	// Workers are the live members, this worker included.
	Workers []Worker
	// Keys are the pool's keys from its source. The policy keeps the
	// slice between plans (its ranking cache is parallel to it, and a
	// copy was 16 bytes a key): a caller replaces it with a new one to
	// change the keys, and never writes to one it has passed.
	Keys []string
	// Owners are the owners of Keys' live leases, position for position.
	// The caller may reuse it for the next round, so a policy must not
	// keep it past Plan.
	Owners Owners
	// HeldSince maps the keys this worker holds to when it acquired them.
	HeldSince map[string]time.Time
}

// Owner is the owner of the live lease of Keys[i], or "" if it has none.
func (v View) Owner(i int) string { return v.Owners.Owner(i) }

// Owners says who holds each of a pool's keys, position for position, in
// four bytes a key: a plan reads every key's owner each round, so it is
// a slice rather than a map by key (at a million keys, building and
// reading a map was most of a plan's time), and a number rather than
// the owner's name, as a pool has a few owners and many keys (a name was
// 16 bytes a key, 160 bytes per held key on a pool of ten workers).
type Owners struct {
	// Of is, per key, its owner's number: n for IDs[n-1], and 0 for no
	// live lease (never held, released or expired), as is any number
	// IDs has no owner for. A nil or short slice leaves the keys past its
	// end without one.
	Of []int32
	// IDs are the owners, by number less one. An owner may appear more
	// than once: its keys count together.
	IDs []string
}

// OwnersOf numbers a list of owners by key, "" for none.
func OwnersOf(owners []string) Owners {
	var n OwnerNumbers
	o := Owners{Of: make([]int32, len(owners))}
	for i, owner := range owners {
		o.Of[i] = n.Number(owner)
	}
	o.IDs = n.IDs()
	return o
}

// Owner is the owner of key i, or "" if it has none.
func (o Owners) Owner(i int) string {
	if i < len(o.Of) {
		return o.id(o.Of[i])
	}
	return ""
}

// id is the owner of number n, or "" if there is none.
func (o Owners) id(n int32) string {
	if n > 0 && int(n) <= len(o.IDs) {
		return o.IDs[n-1]
	}
	return ""
}

// OwnerNumbers numbers owners for Owners.Of, each the first time it is
// seen. The zero value is ready to use.
type OwnerNumbers struct {
	ids  []string
	byID map[string]int32
}

// Number is the number of owner, 0 for "".
func (n *OwnerNumbers) Number(owner string) int32 {
	if owner == "" {
		return 0
	}
	if num, ok := n.byID[owner]; ok {
		return num
	}
	if n.byID == nil {
		n.byID = make(map[string]int32)
	}
	n.ids = append(n.ids, owner)
	num := int32(len(n.ids))
	n.byID[owner] = num
	return num
}

// IDs are the owners numbered so far, by number less one: Owners.IDs.
func (n *OwnerNumbers) IDs() []string { return n.ids }

// Reset forgets every number, keeping the room for the next round's.
func (n *OwnerNumbers) Reset() {
	n.ids = n.ids[:0]
	clear(n.byID)
}

// Plan is what a worker does this round.
type Plan struct {
	// Claim are free keys to acquire, best first.
	Claim []string
	// Release are held keys to give back: shed above the cap, or handed to
	// the worker that prefers them.
	Release []string
	// Target and Cap are this worker's fair share and claim limit.
	Target, Cap int
	// Recheck, when not zero, is when to plan again rather than at the
	// next round: an unowned key's orphan delay ends for this worker, or
	// orphans were left when it stopped at its target (see claim).
	Recheck time.Time
}

// Policy plans one worker's round.
type Policy interface {
	Plan(v View) Plan
}

// Config tunes the balanced policy. Zero fields take their defaults.
type Config struct {
	// Epsilon is the slack above fair share before a worker stops claiming
	// and starts shedding: cap = ceil(fair·(1+Epsilon)). Default 0.1.
	Epsilon float64
	// OrphanDelay is how long a key stays unowned before workers that do
	// not prefer it may claim it, so its preferred worker claims first.
	// Workers at or above their target wait twice as long, so orphans go
	// to the workers that need them; so do workers within their band, for
	// a key whose preferred worker is within its band and not full, while
	// the workers below their band are short of spare keys (pools of few
	// keys a worker). Default 8s:
	// longer than a supervision round (5s by default), so on a store
	// without push the preferred worker sees a handed-over key before
	// anyone else may take it.
	OrphanDelay time.Duration
	// MinHold is how long a key is kept before it may be handed over, so
	// the same key does not bounce. Default 30s. A key taken while its
	// preferred worker was away (a restart) goes back to it sooner, if it
	// had stayed MinHold or more before it went.
	MinHold time.Duration
	// HandoffRate is the fraction of held keys a worker may hand over per
	// round (at least one). Default 0.1.
	HandoffRate float64
}

func (c Config) withDefaults() Config {
	if c.Epsilon <= 0 {
		c.Epsilon = 0.1
	}
	if c.OrphanDelay <= 0 {
		c.OrphanDelay = 8 * time.Second
	}
	if c.MinHold <= 0 {
		c.MinHold = 30 * time.Second
	}
	if c.HandoffRate <= 0 {
		c.HandoffRate = 0.1
	}
	return c
}

// Balanced is Tenure's pool policy: rendezvous preference, a cap slightly
// above fair share, orphan claims after a delay, shedding of the least
// preferred keys, and rate-limited handover to under-target workers. It
// remembers since when each key has been unowned, each key's ranking
// against the workers, the hand-overs it decided on and the workers it
// has seen come and go, so keep one per worker: then a plan ranks every
// key against every worker only when the workers change, not each round.
type Balanced struct {
	cfg         Config
	orphanSince shrink.Map[string, orphan]
	// gaveUp remembers when this worker released a key to rebalance, so
	// it does not claim it straight back as its preferred key. It holds
	// only keys the source listed at the last plan, so it needs pruning
	// only when the source's keys change.
	gaveUp shrink.Map[string, time.Time]
	cache  keyCache
	round  uint64 // plans classified so far, to date orphan entries
	// promised is, per worker this one hands keys to, the part it decided
	// on and what it has released of it (see preferredParts).
	promised map[string]promise
	// present is, by worker name, what this worker has seen of each
	// worker's comings and goings (see presence.go).
	present map[string]presence
	names   map[string]string // the active workers' names by ID, this round
	// spare keeps the last round's lists for the next to fill: they list
	// every held key each round, most of a plan's allocation otherwise.
	spare planRound
	// heldFor is classify's count of keys by owner number and preferred
	// worker, kept for the next plan to reuse.
	heldFor []int32
	// spareShort: at the last plan, what the workers held above their
	// targets could not bring the low workers into their band, beyond
	// what their preferred keys bring (spareNeed's toEdge). Workers
	// within their band then wait longer for orphans (see classifyFree).
	// It is the last plan's, as the keys are counted by holder only once
	// every key has been filed: one plan late, it costs a round at most,
	// since an orphan is claimed from the second plan that sees it free.
	spareShort bool
}

// orphan is since when a key has been unowned, and the last round that saw
// it so. Entries the current round did not see (the key is owned, or left
// the source) are dropped in one sweep of the few orphans, rather than by
// a delete for every owned key.
type orphan struct {
	since time.Time
	round uint64
}

// NewBalanced returns the balanced policy.
func NewBalanced(cfg Config) *Balanced {
	return &Balanced{cfg: cfg.withDefaults(), orphanSince: shrink.Make[string, orphan](),
		gaveUp: shrink.Make[string, time.Time](), present: make(map[string]presence), names: make(map[string]string),
		promised: make(map[string]promise)}
}

type heldKey struct {
	key       string
	preferred bool   // this worker is the key's preferred worker
	myRank    uint32 // this worker's rank for the key: low means least preferred
	pref      string // the preferred worker
}

// planRound is one Plan call's working state, shared by its phases.
type planRound struct {
	v      View
	active []Worker
	shares map[string]Share
	counts map[string]int // live keys per owner
	plan   Plan

	held, preferredFree, orphans []heldKey
	// elsewhere counts, per worker, the keys it prefers but does not hold:
	// what it can still get from its preferences alone. unheld counts the
	// part of them that is free, which it claims without a hand-over.
	elsewhere, unheld map[string]int
	// low are the workers below their band (this one too), each with
	// the keys it prefers that another worker holds, counted by holder
	// (active or not).
	low      map[string]map[string]int
	released map[string]bool
	// leaving are the held keys an earlier plan released whose runners
	// are still stopping: not handed over again against a part (see
	// noteLeaving).
	leaving map[string]bool
}

// Plan implements Policy. It runs in phases: find the active workers and
// their shares, classify every key (held, preferred and free, orphaned),
// claim (preferred keys up to the cap, orphans up to the target while
// under it), shed above the cap, hand keys over towards the workers
// that prefer them, and list what is released.
func (b *Balanced) Plan(v View) Plan {
	rd := &planRound{v: v, active: b.spare.active[:0], held: b.spare.held[:0],
		preferredFree: b.spare.preferredFree[:0], orphans: b.spare.orphans[:0]}
	defer func() {
		b.spare = planRound{active: reuse(rd.active), held: reuse(rd.held),
			preferredFree: reuse(rd.preferredFree), orphans: reuse(rd.orphans)}
	}()
	if !rd.findActive() {
		// Draining (or not yet a member): claim nothing; the engine hands
		// every key back as it stops.
		b.spareShort = false
		return Plan{}
	}
	rd.shares = Shares(b.cfg, rd.active, len(v.Keys))
	mine := rd.shares[v.Self]
	rd.plan.Target, rd.plan.Cap = rd.target(v.Self), mine.Cap
	b.classify(rd)
	b.notePresent(rd)
	b.claim(rd)
	b.noteLeaving(rd)
	rd.shed()
	b.handOver(rd)
	for _, k := range rd.held {
		if rd.released[k.key] {
			rd.plan.Release = append(rd.plan.Release, k.key)
			b.gaveUp.M[k.key] = v.Now
		}
	}
	return rd.plan
}

// reuse empties a list for the next round, or lets it go if this round
// used less than half of it, so that a burst (every key free at startup)
// is not kept for good.
func reuse[T any](s []T) []T {
	if len(s) < cap(s)/2 {
		return nil
	}
	clear(s)
	return s[:0]
}

// findActive keeps the workers that are neither draining nor weightless,
// and reports whether this worker is one of them.
func (rd *planRound) findActive() bool {
	selfActive := false
	for _, w := range rd.v.Workers {
		if w.Draining || w.Weight <= 0 {
			continue
		}
		rd.active = append(rd.active, w)
		if w.ID == rd.v.Self {
			selfActive = true
		}
	}
	return selfActive
}

// classify sorts every key into held, preferred-and-free and orphaned
// (free, claimable once its orphan delay has passed), and keeps the
// policy's memory of orphans and given-up keys current.
func (b *Balanced) classify(rd *planRound) {
	v := rd.v
	c := &b.cache
	if c.sync(v.Self, rd.active, v.Keys) {
		b.forgetGoneKeys(v.Keys)
	}
	b.round++
	rd.counts = make(map[string]int, len(rd.active))
	perNumber := make([]int, len(v.Owners.IDs)+1)
	for _, n := range v.Owners.Of[:min(len(v.Owners.Of), len(v.Keys))] {
		if v.Owners.id(n) != "" {
			perNumber[n]++
		}
	}
	for n, id := range v.Owners.IDs {
		if perNumber[n+1] > 0 {
			rd.counts[id] += perNumber[n+1]
		}
	}
	// Only low workers' counts by holder are needed (spareNeed): the map
	// keeps no others, which a hundred workers would make ten thousand
	// entries. Free keys are filed knowing which workers are low.
	rd.low = make(map[string]map[string]int)
	for _, w := range c.workers {
		if rd.counts[w.ID] < rd.shares[w.ID].Low {
			rd.low[w.ID] = make(map[string]int)
		}
	}
	elsewhere := make([]int, len(c.workers))
	unheld := make([]int, len(c.workers))
	// heldFor counts keys held by another than their preferred worker, by
	// owner number and preferred worker.
	heldFor := b.heldFor[:0]
	if n := (len(v.Owners.IDs) + 1) * len(c.workers); cap(heldFor) < n {
		heldFor = make([]int32, n)
	} else {
		heldFor = heldFor[:n]
		clear(heldFor)
	}
	b.heldFor = heldFor
	for i, key := range v.Keys {
		e := c.entries[i]
		pref := c.workers[e.top].ID
		owner := v.Owner(i)
		owned := owner != ""
		if owner != pref {
			elsewhere[e.top]++
			if owned {
				heldFor[int(v.Owners.Of[i])*len(c.workers)+int(e.top)]++
			}
		}
		if !owned {
			unheld[e.top]++
		}
		switch {
		case owned && owner == v.Self:
			rd.held = append(rd.held, heldKey{key: key, preferred: int(e.top) == c.me, myRank: e.rank, pref: pref})
		case !owned:
			b.classifyFree(rd, heldKey{key: key, preferred: int(e.top) == c.me, myRank: e.rank, pref: pref})
		}
	}
	rd.elsewhere = make(map[string]int, len(c.workers))
	rd.unheld = make(map[string]int, len(c.workers))
	for i, n := range elsewhere {
		if n > 0 {
			rd.elsewhere[c.workers[i].ID] += n
			rd.unheld[c.workers[i].ID] += unheld[i]
		}
	}
	for i, n := range heldFor {
		if n == 0 {
			continue
		}
		if byHolder, low := rd.low[c.workers[i%len(c.workers)].ID]; low {
			byHolder[v.Owners.id(int32(i/len(c.workers)))] += int(n)
		}
	}
	for key, o := range b.orphanSince.M {
		if o.round != b.round {
			b.orphanSince.Delete(key)
		}
	}
	b.orphanSince.Compact()
	for key, at := range b.gaveUp.M {
		if v.Now.Sub(at) >= b.cfg.MinHold {
			b.gaveUp.Delete(key)
		}
	}
	b.gaveUp.Compact()
}

// noteLeaving finds the held keys that an earlier plan released during
// their current term: the engine stops their runners before it releases
// them, and on a store with push this worker plans again many times
// meanwhile. Handed over again at each such plan, the same keys were
// counted again and again against the part promised to the worker that
// prefers them, which was left short until its count changed. Shedding
// above the cap and giving spare keys to low workers may pick them again,
// as before: the spare part is decided afresh at each plan, with no
// promise to count against, so skipping the leaving keys there would make
// every replan give another part of new keys. They count as gone against
// the fewest keys it keeps, though (see handOver).
//
// It walks the given-up keys, not the held ones: there are none at all in
// a settled pool, where a walk of the held keys cost two lookups for each
// of them at every plan.
func (b *Balanced) noteLeaving(rd *planRound) {
	rd.leaving = nil
	for key, gave := range b.gaveUp.M {
		if since, held := rd.v.HeldSince[key]; held && !gave.Before(since) {
			if rd.leaving == nil {
				rd.leaving = make(map[string]bool)
			}
			rd.leaving[key] = true
		}
	}
}

// forgetGoneKeys drops the given-up keys that left the source, so a key
// that comes back is not still cooling.
func (b *Balanced) forgetGoneKeys(keys []string) {
	if len(b.gaveUp.M) == 0 {
		return
	}
	listed := make(map[string]bool, len(b.gaveUp.M))
	for _, key := range keys {
		if _, ok := b.gaveUp.M[key]; ok {
			listed[key] = true
		}
	}
	for key := range b.gaveUp.M {
		if !listed[key] {
			b.gaveUp.Delete(key)
		}
	}
	b.gaveUp.Compact()
}

// classifyFree files a free key: this worker's preferred keys at once
// (unless it gave the key up lately), any other once its orphan delay has
// passed, and otherwise sets Recheck to when that delay ends.
func (b *Balanced) classifyFree(rd *planRound, k heldKey) {
	v := rd.v
	o, ok := b.orphanSince.M[k.key]
	if !ok {
		o.since = v.Now
	}
	o.round = b.round
	b.orphanSince.M[k.key] = o
	since := o.since
	underTarget := rd.counts[v.Self] < rd.plan.Target
	_, selfLow := rd.low[v.Self]
	_, prefLow := rd.low[k.pref]
	// While the low workers are short of spare keys, a preferred worker
	// within its band that leaves its key free gave it up for a low
	// worker (see partOf), or is about to claim it: a worker within its
	// band waits as long as one at its target. Under its target too, the
	// givers among them took the keys back as soon as the low one could,
	// and it stayed low.
	yield := b.spareShort && !selfLow && !prefLow
	delay := b.cfg.OrphanDelay
	switch prefFull := rd.counts[k.pref] >= rd.shares[k.pref].Cap; {
	case prefFull && underTarget:
		delay = 0 // its preferred worker cannot take it: no reason to wait
	case !prefFull && (!underTarget || yield):
		delay *= 2
	}
	_, cooling := b.gaveUp.M[k.key]
	switch {
	case k.preferred && !cooling:
		rd.preferredFree = append(rd.preferredFree, k)
	case v.Now.Sub(since) >= delay:
		rd.orphans = append(rd.orphans, k)
	default:
		rd.recheck(since.Add(delay))
	}
}

// byRankDesc orders keys from most to least preferred by this worker,
// ties by key: two keys may share a rank (ranker.rank), and the order must
// not depend on the order the source lists its keys in.
func byRankDesc(a, b heldKey) int {
	switch {
	case a.myRank > b.myRank:
		return -1
	case a.myRank < b.myRank:
		return 1
	}
	return strings.Compare(a.key, b.key)
}

// claim takes preferred keys first, up to the cap, then orphans: up to the
// target while under it, else up to the cap.
func (b *Balanced) claim(rd *planRound) {
	room := rd.plan.Cap - len(rd.held)
	slices.SortFunc(rd.preferredFree, byRankDesc)
	slices.SortFunc(rd.orphans, byRankDesc)
	for _, k := range rd.preferredFree {
		if room <= 0 {
			break
		}
		rd.plan.Claim = append(rd.plan.Claim, k.key)
		room--
	}
	// A worker under its target takes orphans only up to it: every worker
	// under target sees an orphan's delay end at about the same instant,
	// and when each took up to its cap the ones past their target handed
	// the surplus on, again and again. The orphans it may take were
	// chosen by its count before this round's claims (under target: the
	// shorter delay), so the limit is too, whatever its preferred keys
	// bring. Workers at their target take the rest later (classifyFree),
	// up to the cap. Claims overlap, and one that loses races is left
	// short with orphans still free, while a store pushes no acquisitions
	// to make it plan again: it plans again shortly.
	if len(rd.held) < rd.plan.Target {
		room = min(room, max(0, rd.plan.Target-len(rd.held)-len(rd.plan.Claim)))
		if len(rd.orphans) > room {
			rd.recheck(rd.v.Now.Add(b.cfg.OrphanDelay / 4))
		}
	}
	for _, k := range rd.orphans {
		if room <= 0 {
			break
		}
		rd.plan.Claim = append(rd.plan.Claim, k.key)
		room--
	}
}

// recheck has the worker plan again at t, unless it plans sooner.
func (rd *planRound) recheck(t time.Time) {
	if rd.plan.Recheck.IsZero() || t.Before(rd.plan.Recheck) {
		rd.plan.Recheck = t
	}
}

// shed releases what is held above the cap, choosing keys so that they
// land where they belong: first keys whose preferred worker is under its
// target (it claims them at once), then keys another worker prefers, then
// the keys this worker is least preferred for. It leaves held sorted from
// least to most preferred.
func (rd *planRound) shed() {
	slices.SortFunc(rd.held, func(a, b heldKey) int { return -byRankDesc(a, b) })
	shedClass := func(k heldKey) int {
		switch {
		case !k.preferred && rd.counts[k.pref] < rd.target(k.pref):
			return 0
		case !k.preferred:
			return 1
		}
		return 2
	}
	rd.released = make(map[string]bool)
	for class := 0; class <= 2; class++ {
		for _, k := range rd.held {
			if len(rd.held)-len(rd.released) <= rd.plan.Cap {
				break
			}
			if shedClass(k) == class && !rd.released[k.key] {
				rd.released[k.key] = true
			}
		}
	}
}
