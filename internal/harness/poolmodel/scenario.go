package poolmodel

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Tolerance is the convergence band: every worker within ±10% of fair share.
const Tolerance = 0.10

// Setup is the shape of a timeline run.
type Setup struct {
	Config
	Workers int // at the start
	// Phase is how long each event runs before the next. Default 2 min.
	Phase time.Duration
	// Warm is how long the steady pool runs before the first event.
	// Default 1 min.
	Warm time.Duration
	// RestartBatch is how many workers a rolling restart stops at once:
	// each batch leaves, is back under the same ids 10s later, and the
	// next batch goes 20s after that. Default 1.
	RestartBatch int
}

func (su Setup) withDefaults() Setup {
	if su.Workers <= 0 {
		su.Workers = 10
	}
	if su.Phase <= 0 {
		su.Phase = 2 * time.Minute
	}
	if su.Warm <= 0 {
		su.Warm = time.Minute
	}
	if su.RestartBatch <= 0 {
		su.RestartBatch = 1
	}
	return su
}

// Row is one event's outcome.
type Row struct {
	Scenario string
	Keys     int
	Round    time.Duration
	// MinMoves is the fewest key moves the event needs: the newcomer's
	// share K/(W+1) on a join, the keys the leaver held on a leave or
	// crash. For a rolling restart it is 2K, a reference rather than a
	// minimum: every key leaves its worker and comes back (a policy that
	// left keys unowned while their worker restarts would move fewer).
	MinMoves int
	Stats
}

// RoundsToConverge is Converged in rounds, rounded up; -1 when never.
func (r Row) RoundsToConverge() int {
	if r.Converged < 0 {
		return -1
	}
	return int(math.Ceil(float64(r.Converged) / float64(r.Round)))
}

// WorkerID is the id of the i-th worker, "w000" on.
func WorkerID(i int) string { return fmt.Sprintf("w%03d", i) }

// Timeline runs the pool through the sequence, one phase each:
// su.Workers workers in the steady state, a join, two graceful leaves, a
// crash, then a rolling restart of every remaining worker.
func Timeline(su Setup) ([]Row, error) {
	su = su.withDefaults()
	m, err := New(su.Config)
	if err != nil {
		return nil, err
	}
	ids := make([]string, su.Workers)
	for i := range ids {
		ids[i] = WorkerID(i)
	}
	if err := m.Steady(ids); err != nil {
		return nil, err
	}
	m.RunFor(su.Warm)
	n, keys := su.Workers, m.cfg.Keys
	var rows []Row
	event := func(name string, minMoves int, do func() error) error {
		w := m.Mark()
		if err := do(); err != nil {
			return err
		}
		m.RunFor(su.Phase)
		rows = append(rows, Row{Scenario: name, Keys: keys, Round: m.cfg.Round, MinMoves: minMoves, Stats: m.Stats(w, Tolerance)})
		return nil
	}
	if err := event(fmt.Sprintf("join %d→%d", n, n+1), keys/(n+1), func() error { return m.Join(WorkerID(n)) }); err != nil {
		return nil, err
	}
	n++
	for i := range 2 {
		if err := event(fmt.Sprintf("leave %d→%d", n, n-1), m.Held(WorkerID(i)), func() error { return m.Leave(WorkerID(i)) }); err != nil {
			return nil, err
		}
		n--
	}
	if err := event(fmt.Sprintf("crash %d→%d", n, n-1), m.Held(WorkerID(2)), func() error { return m.Crash(WorkerID(2)) }); err != nil {
		return nil, err
	}
	n--
	row, err := rollingRestart(m, su, n)
	if err != nil {
		return nil, err
	}
	return append(rows, row), nil
}

// rollingRestart restarts every active worker, su.RestartBatch at a time.
// Converged counts from the last batch's return.
func rollingRestart(m *Model, su Setup, n int) (Row, error) {
	w := m.Mark()
	var last Window
	active := m.Active()
	for len(active) > 0 {
		batch := active[:min(su.RestartBatch, len(active))]
		active = active[len(batch):]
		for _, id := range batch {
			if err := m.Leave(id); err != nil {
				return Row{}, err
			}
		}
		m.RunFor(10 * time.Second)
		last = m.Mark()
		for _, id := range batch {
			if err := m.Join(id); err != nil {
				return Row{}, err
			}
		}
		m.RunFor(20 * time.Second)
	}
	m.RunFor(su.Phase)
	name := fmt.Sprintf("rolling restart of %d", n)
	if su.RestartBatch > 1 {
		name += fmt.Sprintf(", %d at a time", su.RestartBatch)
	}
	row := Row{Scenario: name, Keys: m.cfg.Keys, Round: m.cfg.Round, MinMoves: 2 * m.cfg.Keys, Stats: m.Stats(w, Tolerance)}
	row.Converged = m.Stats(last, Tolerance).Converged
	return row, nil
}

// Table formats rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| scenario | keys | moves (min) | ×min | rounds to ±10% | max unowned | crash → owned | bounces | end min–max | idle | plans | policy CPU per plan |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio, rounds, recovery, perPlan := "–", "never", "–", "–"
		if r.MinMoves > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.Moves)/float64(r.MinMoves))
		}
		if n := r.RoundsToConverge(); n >= 0 {
			rounds = fmt.Sprint(n)
		}
		if r.Recovery > 0 {
			recovery = r.Recovery.Round(100 * time.Millisecond).String()
			if r.Unrecovered > 0 {
				recovery += fmt.Sprintf(" (%d still unowned)", r.Unrecovered)
			}
		}
		if r.Plans > 0 {
			perPlan = (r.PlanTime / time.Duration(r.Plans)).Round(100 * time.Microsecond).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %d (%d) | %s | %s | %v | %s | %d | %d–%d | %d | %d | %s |\n",
			r.Scenario, r.Keys, r.Moves, r.MinMoves, ratio, rounds, r.MaxUnowned.Round(100*time.Millisecond), recovery,
			r.Bounces, r.Min, r.Max, r.Idle, r.Plans, perPlan)
	}
	return b.String()
}
