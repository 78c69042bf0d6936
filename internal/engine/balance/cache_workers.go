package balance

import "slices"

// followWorkers brings the entries from the workers they were ranked for
// to ws, ranking a key against every worker only when its preferred
// worker left. A key's preferred worker is the highest of a set in one
// order (score, then lower ID), and a worker that stays keeps its place
// in that order, so:
//
//   - a key whose preferred worker stays still prefers it over every
//     worker that stays, and need only be compared with the newcomers;
//   - a key whose preferred worker left is ranked against all of ws;
//   - this worker's score for a key does not change, as self and its own
//     record stay.
//
// A worker that changed its name or weight under the same ID counts as
// one that left and one that joined. followWorkers reports false, and
// changes nothing, when the order itself may have changed, or it has no
// order, or a full ranking costs little more; sync then ranks every key.
func (c *keyCache) followWorkers(self string, ws []Worker) bool {
	if c.ranks == nil || self != c.self || c.me < 0 || !ordered(c.workers) || !ordered(ws) {
		return false
	}
	r := newRanker(ws)
	me := slices.IndexFunc(ws, func(w Worker) bool { return w.ID == self })
	// All weights equal, workers are compared by raw hash; else by weighted
	// score, which orders them differently: every key may move. Self's
	// score for every key changes with its record.
	if r.uniform != c.ranks.uniform || me < 0 || !sameRanking(ws[me], c.workers[c.me]) {
		return false
	}
	moved, joined, left := matchWorkers(c.workers, ws)
	// Past half the pool, following the change saves at most half of a
	// full ranking: not worth a second way of ranking every key.
	if 2*(len(joined)+left) > len(ws) {
		return false
	}
	c.workers, c.ranks, c.me = slices.Clone(ws), r, me
	for i, key := range c.keys {
		e := &c.entries[i]
		switch top := moved[e.top]; {
		case top < 0:
			*e = c.rank(key)
		case len(joined) > 0:
			e.top = int32(r.topAmong(hashString(key), int(top), joined))
		default:
			e.top = top
		}
	}
	return true
}

// ordered reports whether followWorkers can follow a change from or to
// ws: its IDs strictly increasing, so that matchWorkers can pair old and
// new workers by ID in one walk (canonical sorts by ID, so only an ID
// listed twice breaks this), and every weight above zero, so that every
// score compares with every other. A weight of NaN scores NaN, which
// compares false with everything, so a full ranking depends on where the
// worker is listed: first, it wins every key; later, none. A weight of
// zero scores 0/0 for the rare key whose u rounds to 1.
func ordered(ws []Worker) bool {
	for i, w := range ws {
		if !(w.Weight > 0) || i > 0 && ws[i-1].ID >= w.ID {
			return false
		}
	}
	return true
}

// matchWorkers pairs the workers of two lists sorted by ID: moved gives
// each old worker's index in ws, or -1 if it left or now ranks keys
// differently; joined lists the indexes in ws of the others.
func matchWorkers(old, ws []Worker) (moved []int32, joined []int, left int) {
	moved = make([]int32, len(old))
	i, j := 0, 0
	for i < len(old) || j < len(ws) {
		switch {
		case j == len(ws) || i < len(old) && old[i].ID < ws[j].ID:
			moved[i] = -1
			left++
			i++
		case i == len(old) || ws[j].ID < old[i].ID:
			joined = append(joined, j)
			j++
		case sameRanking(old[i], ws[j]):
			moved[i] = int32(j)
			i, j = i+1, j+1
		default:
			moved[i] = -1
			left++
			joined = append(joined, j)
			i, j = i+1, j+1
		}
	}
	return moved, joined, left
}
