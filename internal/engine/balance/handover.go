package balance

import (
	"math"
	"time"
)

// Hand-overs: the keys a worker releases so that they land where they
// belong, and how much of a low worker's need each holder gives.

// promise is a hand-over this worker decided on: at when the receiving
// worker held count keys, part keys to give it in all, given of them
// released so far.
type promise struct {
	at                 time.Time
	count, part, given int
}

// handOver releases, after the minimum hold and a few per round, first
// the keys another worker prefers, to that worker while it is under its
// target and this one keeps the low edge of its own share. A key this
// worker took while that worker was away from the pool after a stay of
// MinHold or more (a rolling restart) goes back before the minimum hold:
// holding it longer only keeps the returning worker short, as it moves
// back in the end anyway. Then, while another worker is below its band,
// its least-preferred keys as spare keys, down to its own target, or to
// its low edge when what is above targets, free or held by a worker that
// is not active cannot bring the low workers into their band (see
// partOf); the workers that need them claim them first (see
// classifyFree).
func (b *Balanced) handOver(rd *planRound) {
	v := rd.v
	budget := max(1, int(math.Ceil(b.cfg.HandoffRate*float64(len(rd.held)))))
	deficit := make(map[string]int)
	for _, w := range rd.active {
		deficit[w.ID] = rd.target(w.ID) - rd.counts[w.ID]
	}
	toTarget, toEdge := b.spareNeed(rd, deficit)
	holdOK := func(key string) bool {
		since, ok := v.HeldSince[key]
		return !ok || v.Now.Sub(since) >= b.cfg.MinHold
	}
	tookWhileAway := func(k heldKey) bool {
		since, ok := v.HeldSince[k.key]
		return ok && b.takenWhileAway(k.pref, since)
	}
	toGive := b.preferredParts(rd, deficit)
	defer b.keepPromises(toGive)
	// A holder of more of a worker's preferred keys than most (rendezvous
	// spreads them unevenly) that gave its whole part fell below its own
	// band, and only spare keys could refill it, after an orphan delay
	// each: a join took MinHold to settle. So it keeps its low edge, and
	// spareNeed counts only what it can give. Keys still stopping from an
	// earlier plan are on their way out: they count as gone, here and
	// against the floor of the spare keys below.
	kept := len(rd.held) - len(rd.released)
	for key := range rd.leaving {
		if !rd.released[key] {
			kept--
		}
	}
	release := func(key string) {
		if !rd.leaving[key] {
			kept--
		}
		rd.released[key] = true
		budget--
	}
	for _, k := range rd.held {
		if budget <= 0 || kept <= rd.shares[v.Self].Low {
			break
		}
		if rd.released[k.key] || rd.leaving[k.key] || k.preferred || toGive[k.pref] <= 0 || !(holdOK(k.key) || tookWhileAway(k)) {
			continue
		}
		release(k.key)
		toGive[k.pref]--
	}
	above, held := rd.aboveTargets()
	b.spareShort = above < toEdge
	// What can come while every worker keeps its target: the keys above
	// targets, and those free or held by a worker that is not active.
	spare, floor := b.partOf(rd, toTarget, toEdge, above+len(v.Keys)-held)
	for _, k := range rd.held {
		if budget <= 0 || spare <= 0 || kept <= floor {
			break
		}
		if rd.released[k.key] || !holdOK(k.key) {
			continue
		}
		release(k.key)
		spare--
	}
}

// spareNeed is how many keys the low workers (below their band) need
// that their preferred keys cannot bring: for each, the deficit less the
// free ones and, per holder, what it can give while it keeps its own low
// edge (see handOver). Those it gets as spare keys, which it does not
// prefer: counting the keys a holder keeps would leave it short for
// good, and handing more than the rest would move keys twice. A holder's
// room counts for every low worker it holds keys of, so two low workers
// may count the same room, and their spare keys come a round later; a
// holder that has reached its edge counts for none. toTarget is what
// brings them to their targets, toEdge what brings them into their band
// (see partOf).
func (b *Balanced) spareNeed(rd *planRound, deficit map[string]int) (toTarget, toEdge int) {
	for w, byHolder := range rd.low {
		if w == rd.v.Self {
			continue
		}
		cover := rd.unheld[w]
		for holder, n := range byHolder {
			cover += min(n, rd.aboveEdge(holder))
		}
		toTarget += max(0, deficit[w]-cover)
		toEdge += max(0, rd.shares[w].Low-rd.counts[w]-cover)
	}
	return toTarget, toEdge
}

// preferredParts is, per worker under its target, how many of the keys it
// prefers and this worker holds are still to be handed to it: what is
// left of the part decided on. Rendezvous gives a
// worker about ±10 % of its share at a thousand keys, so a newcomer may
// prefer more keys than its target; every holder plans on the same view,
// and when each handed over all it held, the newcomer got them all, went
// above its cap, and the surplus moved on again. So each holder gives its
// part of the need: the deficit less the preferred keys that are free
// (the worker claims those itself), in proportion to the keys this worker
// holds among those the others hold. Keys it shed this round above its cap
// are part of what it gives.
//
// A part, once decided, stands until the receiving worker's count changes
// (it claimed what it was given) or an orphan delay passes. On a store
// with push every worker replans at each release, many times before the
// newcomer's next round, while the other holders' releases are still on
// their way and look held: a part of what looks left at each replan added
// up to half again what the newcomer needed.
func (b *Balanced) preferredParts(rd *planRound, deficit map[string]int) map[string]int {
	mine := make(map[string]int)
	shed := make(map[string]int) // released already this round, above the cap
	for _, k := range rd.held {
		if !k.preferred {
			mine[k.pref]++
			if rd.released[k.key] {
				shed[k.pref]++
			}
		}
	}
	for w := range b.promised {
		if _, ok := mine[w]; !ok {
			delete(b.promised, w)
		}
	}
	parts := make(map[string]int, len(mine))
	for w, n := range mine {
		p, ok := b.promised[w]
		if !ok || p.count != rd.counts[w] || rd.v.Now.Sub(p.at) >= b.cfg.OrphanDelay || rd.v.Now.Before(p.at) {
			p = promise{at: rd.v.Now, count: rd.counts[w], part: b.partFor(rd, w, n, deficit[w])}
		}
		p.given += shed[w]
		b.promised[w] = p
		parts[w] = p.part - p.given
	}
	return parts
}

// partFor is how many of the n keys this worker holds that w prefers to
// hand w, for a deficit d (see preferredParts).
func (b *Balanced) partFor(rd *planRound, w string, n, d int) int {
	need := d - rd.unheld[w]
	held := rd.elsewhere[w] - rd.unheld[w] // by other workers, this one included
	if byHolder, low := rd.low[w]; low {
		// Holders give a low worker only what keeps them at their own
		// edge, as spareNeed counts: the need is split over that alone.
		// Split over every key held elsewhere, the one holder with room
		// drew a small part of a need the others could not give, and a
		// worker one key short stayed low for minutes (32 keys over 8).
		held = 0
		for holder, m := range byHolder {
			held += min(m, rd.aboveEdge(holder))
		}
		n = min(n, rd.aboveEdge(rd.v.Self))
	}
	switch {
	case need <= 0:
		return 0
	case held <= need:
		return n
	}
	return b.draw(rd, w, float64(need)*float64(n)/float64(held))
}

// keepPromises records what this round released of each part: left is
// what remains of each after the round.
func (b *Balanced) keepPromises(left map[string]int) {
	for w, p := range b.promised {
		if l, ok := left[w]; ok {
			p.given = p.part - max(l, 0)
			b.promised[w] = p
		}
	}
}

// partOf is this worker's part of the spare keys the low workers need,
// and the fewest keys it keeps while giving it. Every worker plans on the
// same view, so each gives a part in proportion to what it can give, and
// together they give about the need. When each gave all of it, a worker
// coming back to a pool of a hundred was handed a hundred times what it
// needed, and the surplus moved on again as orphans. What a worker can
// give is measured alike for all, this one included, from the table's
// counts: what it holds above its target, at most its hand-over budget,
// towards bringing the low workers to their targets. The fraction of a
// key left over is drawn (see draw).
//
// Targets are rounded up, so they add up to more than the keys, by up to
// one a worker: in a pool of fewer than about ten times the square of its
// workers, a worker can be below its band while every other is at or
// under its target. When what the others hold above their targets, and
// the keys free or held by a worker that is not active, cannot bring the
// low workers into their band, what a worker can give is measured above
// its low edge instead, towards bringing them just into their band: a
// worker below its band otherwise stayed there for good.
func (b *Balanced) partOf(rd *planRound, toTarget, toEdge, supply int) (part, floor int) {
	need, floorOf := toTarget, rd.target
	if supply < toEdge {
		need, floorOf = toEdge, func(id string) int { return rd.shares[id].Low }
	}
	canGive := func(id string) int {
		n := rd.counts[id]
		return min(n-floorOf(id), max(1, int(math.Ceil(b.cfg.HandoffRate*float64(n)))))
	}
	floor = floorOf(rd.v.Self)
	mine := canGive(rd.v.Self)
	if need <= 0 || mine <= 0 {
		return 0, floor
	}
	all := 0
	for _, w := range rd.active {
		all += max(0, canGive(w.ID))
	}
	return b.draw(rd, "", float64(need)*float64(mine)/float64(all)), floor
}

// target is worker id's target, its fair share rounded up.
func (rd *planRound) target(id string) int { return int(math.Ceil(rd.shares[id].Fair)) }

// aboveEdge is what worker id holds above its low edge: what it can give
// a low worker (see handOver). A worker that is not active has no share,
// so no edge: it can give all it holds.
func (rd *planRound) aboveEdge(id string) int { return max(0, rd.counts[id]-rd.shares[id].Low) }

// aboveTargets is what the active workers hold above their targets, and
// held is what they hold in all.
func (rd *planRound) aboveTargets() (above, held int) {
	for _, w := range rd.active {
		n := rd.counts[w.ID]
		above += max(0, n-rd.target(w.ID))
		held += n
	}
	return above, held
}

// draw rounds a part of a key count: down, or up with the probability of
// its fraction, drawn from this worker, the instant and salt (the worker
// the part is for), so that a small need spread over many workers is met
// on average without any two of them having to agree.
func (b *Balanced) draw(rd *planRound, salt string, exact float64) int {
	part := int(exact)
	x := mix(hashString(rd.v.Self) ^ hashString(salt) ^ uint64(rd.v.Now.UnixNano()))
	if float64(x>>11)/(1<<53) < exact-float64(part) {
		part++
	}
	return part
}
