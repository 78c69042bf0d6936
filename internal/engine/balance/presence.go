package balance

import "time"

// presence is what a worker has seen of another's comings and goings,
// by the other's name, which a restart keeps (its ID changes).
type presence struct {
	// since is when the current stay began: the zero time for a worker
	// present at this worker's first round, as far back as it knows.
	since time.Time
	// seen and round are the last plan that saw it.
	seen  time.Time
	round uint64
	// goneAt is the first plan that missed it after it was last seen.
	goneAt time.Time
	// awayFrom is goneAt before this stay, if the stay before lasted
	// MinHold or more; zero otherwise.
	awayFrom time.Time
}

// notePresent keeps the presence of every active worker. A worker missing
// from one plan and back at a later one has been away in between. Workers
// gone for MinHold are forgotten, so the map holds only the pool's recent
// members; one that comes back after that is new, and the keys taken
// while it was away wait MinHold like any other.
func (b *Balanced) notePresent(rd *planRound) {
	now := rd.v.Now
	clear(b.names)
	for _, w := range rd.active {
		name := w.Name
		if name == "" {
			name = w.ID
		}
		b.names[w.ID] = name
		p, ok := b.present[name]
		switch {
		case ok && p.round == b.round:
			continue // a second worker of that name
		case !ok:
			if b.round > 1 {
				p.since = now
			}
		case p.round != b.round-1:
			// Back from away. A stay shorter than MinHold (a worker in a
			// crash loop) gives no claim to its keys before MinHold: they
			// would only move again when it goes.
			p.awayFrom = time.Time{}
			if p.since.IsZero() || p.seen.Sub(p.since) >= b.cfg.MinHold {
				p.awayFrom = p.goneAt
			}
			p.since = now
		}
		p.seen, p.round = now, b.round
		b.present[name] = p
	}
	for name, p := range b.present {
		switch {
		case p.round == b.round:
		case p.round == b.round-1: // the first plan to miss it
			p.goneAt = now
			b.present[name] = p
		case now.Sub(p.seen) >= b.cfg.MinHold:
			delete(b.present, name)
		}
	}
}

// takenWhileAway reports whether a key held since heldSince, which the
// worker with ID pref prefers, was taken while that worker was away (from
// the first plan that missed it) after a stay of MinHold or more.
func (b *Balanced) takenWhileAway(pref string, heldSince time.Time) bool {
	p, ok := b.present[b.names[pref]]
	return ok && !p.awayFrom.IsZero() && !heldSince.Before(p.awayFrom) && heldSince.Before(p.since)
}
