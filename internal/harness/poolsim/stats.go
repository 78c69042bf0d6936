package poolsim

import (
	"math"
	"time"
)

// Window marks the start of a measured stretch of a run.
type Window struct {
	From       time.Time
	base       Totals
	samples    int
	episodes   int
	recoveries int
}

// Mark starts a window now.
func (s *Sim) Mark() Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Window{From: time.Now(), base: s.totals, samples: len(s.samples), episodes: len(s.episodes), recoveries: len(s.recoveries)}
}

// Stats are what happened in a window.
type Stats struct {
	From, To time.Time
	// Totals are the counters' growth over the window.
	Totals
	// MaxUnowned is the longest spell a key ran nowhere (from the end of
	// its last run, or the start for a key never run), among spells that
	// ended in the window or were still open at its end.
	MaxUnowned time.Duration
	// Unowned are the keys running nowhere at the end.
	Unowned int
	// Recovery is the longest time from a crash until one of the crashed
	// worker's keys ran again; spells still open count to the end and are
	// also counted in Unrecovered.
	Recovery    time.Duration
	Unrecovered int
	// Converged is how long after the window's start every active worker
	// came within the tolerance of its fair share and stayed there at
	// every later sample; negative when that had not happened by the end.
	Converged time.Duration
	// End is the keys each active worker runs at the end.
	End Sample
	// Idle counts active workers running no key at the end; Min and Max
	// are the fewest and most keys an active worker runs then.
	Idle, Min, Max int
}

// Stats reports the window from w to now. tol is the convergence
// tolerance as a fraction of fair share (0.1 for ±10%).
func (s *Sim) Stats(w Window, tol float64) Stats {
	now := time.Now()
	st := Stats{From: w.From, To: now, End: s.counts()}
	s.mu.Lock()
	st.Totals = s.totals.minus(w.base)
	for _, e := range s.episodes[w.episodes:] {
		st.MaxUnowned = max(st.MaxUnowned, e.to.Sub(e.from))
	}
	for k, kl := range s.keys {
		switch {
		case !kl.ever:
			st.Unowned++
			st.MaxUnowned = max(st.MaxUnowned, now.Sub(s.start))
		case len(kl.open) == 0:
			st.Unowned++
			st.MaxUnowned = max(st.MaxUnowned, now.Sub(kl.last.end))
		}
		if crashed, ok := s.crashWatch[k]; ok && !crashed.Before(w.From) {
			st.Unrecovered++
			st.Recovery = max(st.Recovery, now.Sub(crashed))
		}
	}
	for _, e := range s.recoveries[w.recoveries:] {
		st.Recovery = max(st.Recovery, e.to.Sub(e.from))
	}
	s.mu.Unlock()

	st.Converged = -1
	samples := s.samples[w.samples:]
	for i := len(samples) - 1; i >= 0; i-- {
		if !within(samples[i].Counts, len(s.cfg.Keys), tol) {
			break
		}
		st.Converged = samples[i].At.Sub(w.From)
	}

	st.Min = math.MaxInt
	for _, n := range st.End.Counts {
		if n == 0 {
			st.Idle++
		}
		st.Min, st.Max = min(st.Min, n), max(st.Max, n)
	}
	if len(st.End.Counts) == 0 {
		st.Min = 0
	}
	return st
}

// within reports whether every worker's count is within tol of fair share.
func within(counts map[string]int, keys int, tol float64) bool {
	if len(counts) == 0 {
		return false
	}
	fair := float64(keys) / float64(len(counts))
	for _, n := range counts {
		if math.Abs(float64(n)-fair) > tol*fair {
			return false
		}
	}
	return true
}

func (t Totals) minus(b Totals) Totals {
	return Totals{
		Acquires:   t.Acquires - b.Acquires,
		Moves:      t.Moves - b.Moves,
		Bounces:    t.Bounces - b.Bounces,
		Released:   t.Released - b.Released,
		FreshSheds: t.FreshSheds - b.FreshSheds,
		Refusals:   t.Refusals - b.Refusals,
		Lost:       t.Lost - b.Lost,
		Overlaps:   t.Overlaps - b.Overlaps,

		DeadlineStops: t.DeadlineStops - b.DeadlineStops,
		Lists:         t.Lists - b.Lists,
		RowsRead:      t.RowsRead - b.RowsRead,
	}
}
