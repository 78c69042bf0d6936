package poolmodel

import (
	"math"
	"time"
)

// spell is a stretch of time that ended at end: a key running nowhere, or
// a crashed worker's key until it ran again.
type spell struct{ end, length time.Duration }

type spells struct{ unowned, recovered []spell }

// Window marks the start of a measured stretch of a run.
type Window struct {
	From      time.Duration
	base      Totals
	samples   int
	unowned   int
	recovered int
}

// Mark starts a window now.
func (m *Model) Mark() Window {
	return Window{From: m.now, base: m.totals, samples: len(m.samples), unowned: len(m.spells.unowned), recovered: len(m.spells.recovered)}
}

// Stats are what happened in a window; the fields mean what poolsim's
// do, so the two simulators' tables read alike.
type Stats struct {
	From, To time.Duration
	Totals
	// MaxUnowned is the longest spell a key ran nowhere, among spells that
	// ended in the window or were still open at its end.
	MaxUnowned time.Duration
	// Unowned are the keys running nowhere at the end.
	Unowned int
	// Recovery is the longest time from a crash until one of the crashed
	// worker's keys ran again; keys still waiting count to the end and are
	// also counted in Unrecovered.
	Recovery    time.Duration
	Unrecovered int
	// Converged is how long after the window's start every active worker
	// came within the tolerance of its fair share, with no more keys
	// unowned than that tolerance of one share, and stayed so at every
	// later sample; negative when that had not happened by the end. The
	// unowned keys count because at a hundred workers losing one moves
	// fair share by 1%, well inside ±10%, while its keys wait for owners;
	// a few keys in transit between workers do not stop convergence.
	Converged time.Duration
	// Idle counts active workers holding no key at the end; Min and Max
	// are the fewest and most keys an active worker holds then.
	Idle, Min, Max int
}

// Stats reports the window from w to now. tol is the convergence
// tolerance as a fraction of fair share (0.1 for ±10%).
func (m *Model) Stats(w Window, tol float64) Stats {
	st := Stats{From: w.From, To: m.now, Totals: m.totals.minus(w.base)}
	for _, s := range m.spells.unowned[w.unowned:] {
		st.MaxUnowned = max(st.MaxUnowned, s.length)
	}
	for _, s := range m.spells.recovered[w.recovered:] {
		st.Recovery = max(st.Recovery, s.length)
	}
	for i := range m.keys {
		if since := m.idleSince[i]; since != none {
			st.Unowned++
			st.MaxUnowned = max(st.MaxUnowned, m.now-since)
		}
		if since := m.crashedSince[i]; since != none && since >= w.From {
			st.Unrecovered++
			st.Recovery = max(st.Recovery, m.now-since)
		}
	}

	st.Converged = -1
	samples := m.samples[w.samples:]
	for i := len(samples) - 1; i >= 0; i-- {
		if !within(samples[i], len(m.keys), tol) {
			break
		}
		st.Converged = samples[i].At - w.From
	}

	st.Min = math.MaxInt
	for _, w := range m.workers {
		if w.up {
			if w.held == 0 {
				st.Idle++
			}
			st.Min, st.Max = min(st.Min, w.held), max(st.Max, w.held)
		}
	}
	if st.Min == math.MaxInt {
		st.Min = 0
	}
	return st
}

// within reports whether every worker's count is within tol of fair
// share, and no more than tol of a share is unowned.
func within(s Sample, keys int, tol float64) bool {
	if len(s.Counts) == 0 {
		return false
	}
	fair := float64(keys) / float64(len(s.Counts))
	if float64(s.Unowned) > tol*fair {
		return false
	}
	for _, n := range s.Counts {
		if math.Abs(float64(n)-fair) > tol*fair {
			return false
		}
	}
	return true
}

func (t Totals) minus(b Totals) Totals {
	return Totals{
		Plans:    t.Plans - b.Plans,
		Claims:   t.Claims - b.Claims,
		Refused:  t.Refused - b.Refused,
		Released: t.Released - b.Released,
		Moves:    t.Moves - b.Moves,
		Bounces:  t.Bounces - b.Bounces,
		PlanTime: t.PlanTime - b.PlanTime,
	}
}
