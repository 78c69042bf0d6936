package poolsim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

// Policy names a policy, tunes or replaces Tenure's on every worker, and
// says how a pool that has been running it for a while starts.
type Policy struct {
	Name string
	// Balance tunes Tenure's policy (Config.Balance).
	Balance balance.Config
	// New, when set, replaces Tenure's policy (Config.NewPolicy).
	New func(worker string) balance.Policy
	// Steady starts workers ids in the policy's own steady state, the
	// state the events of a scenario start from.
	Steady func(s *Sim, ctx context.Context, ids []string) error
}

// BalancedPolicy is Tenure's policy with cfg. Its steady state is what it
// reaches when every worker is a member before the first round: each
// claims the keys it is preferred for.
func BalancedPolicy(name string, cfg balance.Config) Policy {
	return Policy{
		Name:    name,
		Balance: cfg,
		Steady:  (*Sim).StartAll,
	}
}

// ReferencePolicy is the reference design's policy with cfg. It starts
// from an even split (key i on worker i mod W), its best case: everyone
// at fair share, under the shed threshold, with nothing free to claim.
// From a cold start it never gets there (see the cold start scenario).
func ReferencePolicy(cfg ReferenceConfig) Policy {
	return Policy{
		Name:   "reference",
		New:    func(string) balance.Policy { return NewReference(cfg) },
		Steady: (*Sim).SeedEven,
	}
}

// Tolerance is the convergence band: every worker within ±10% of fair share.
const Tolerance = 0.10

// Row is one scenario's outcome under one policy.
type Row struct {
	Scenario string
	Policy   string
	Keys     int
	Interval time.Duration // the claim interval, to express times in rounds
	// MinMoves is the fewest key moves the event needs: the newcomer's
	// share K/(W+1) on a join, the leaver's share K/W on a leave or crash.
	MinMoves int
	Stats
}

// RoundsToConverge is Converged in claim intervals, rounded up; -1 when
// never.
func (r Row) RoundsToConverge() int {
	if r.Converged < 0 {
		return -1
	}
	return int(math.Ceil(float64(r.Converged) / float64(r.Interval)))
}

// Setup is the common shape of a scenario run.
type Setup struct {
	Keys    int
	Workers int // at the start
	Seed    uint64
	// Phase is how long each phase runs after its event. Default 5 min:
	// long enough for the reference's 60s rebalance to act a few times.
	Phase time.Duration
	// Warm is how long the pool runs before the first event, so that the
	// hand-overs of its start are done and every key is past MinHold.
	// Default 4 min.
	Warm time.Duration
	// Push: the store pushes releases (see Config.Push).
	Push bool
	// MinHold is the window for bounces and fresh sheds (Config.MinHold).
	MinHold time.Duration
}

func (su Setup) withDefaults() Setup {
	if su.Workers <= 0 {
		su.Workers = 10
	}
	if su.Phase <= 0 {
		su.Phase = 5 * time.Minute
	}
	if su.Warm <= 0 {
		su.Warm = 4 * time.Minute
	}
	return su
}

// Keys returns n pool keys, "acct-00000" on.
func Keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("acct-%05d", i)
	}
	return out
}

// WorkerID is the id of the i-th worker, "w00" on.
func WorkerID(i int) string { return fmt.Sprintf("w%02d", i) }

func workerIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = WorkerID(i)
	}
	return out
}

func (su Setup) newSim(p Policy) (*Sim, error) {
	return New(Config{Keys: Keys(su.Keys), Balance: p.Balance, NewPolicy: p.New, Seed: su.Seed, Push: su.Push, MinHold: su.MinHold})
}

func (su Setup) row(s *Sim, scenario string, p Policy, minMoves int, w Window) Row {
	return Row{Scenario: scenario, Policy: p.Name, Keys: su.Keys, Interval: s.cfg.ClaimInterval, MinMoves: minMoves, Stats: s.Stats(w, Tolerance)}
}

// ColdStart starts su.Workers workers on an empty store within one claim
// interval and runs one phase. Like every scenario, it runs inside
// synctest.Test.
func ColdStart(ctx context.Context, p Policy, su Setup) (_ Row, err error) {
	su = su.withDefaults()
	s, err := su.newSim(p)
	if err != nil {
		return Row{}, err
	}
	defer closeSim(s, &err)
	w := s.Mark()
	for i, id := range workerIDs(su.Workers) {
		// One process after another, a little apart, as a rollout does.
		s.JoinAt(s.Now().Add(time.Duration(i)*s.cfg.ClaimInterval/time.Duration(su.Workers)), id)
	}
	if err := s.RunFor(ctx, su.Phase); err != nil {
		return Row{}, err
	}
	return su.row(s, fmt.Sprintf("cold start, %d workers", su.Workers), p, 0, w), nil
}

// Join starts su.Workers workers in the policy's steady state, warms up,
// then adds one worker.
func Join(ctx context.Context, p Policy, su Setup) (_ Row, err error) {
	row, s, err := runJoin(ctx, p, su)
	if err != nil {
		return Row{}, err
	}
	defer closeSim(s, &err)
	return row, nil
}

// runJoin is Join, and returns the Sim, still running, for the caller to
// go on with and close; on an error it is closed already.
func runJoin(ctx context.Context, p Policy, su Setup) (Row, *Sim, error) {
	su = su.withDefaults()
	s, err := su.newSim(p)
	if err != nil {
		return Row{}, nil, err
	}
	err = p.Steady(s, ctx, workerIDs(su.Workers))
	if err == nil {
		err = s.RunFor(ctx, su.Warm)
	}
	var row Row
	if err == nil {
		row, err = su.join(ctx, s, p, su.Workers)
	}
	if err != nil {
		closeSim(s, &err)
		return Row{}, nil, err
	}
	return row, s, nil
}

// closeSim closes s and adds its error to *err.
func closeSim(s *Sim, err *error) {
	*err = errors.Join(*err, s.Close())
}

func (su Setup) join(ctx context.Context, s *Sim, p Policy, n int) (Row, error) {
	w := s.Mark()
	if err := s.Join(ctx, WorkerID(n)); err != nil {
		return Row{}, err
	}
	if err := s.RunFor(ctx, su.Phase); err != nil {
		return Row{}, err
	}
	return su.row(s, fmt.Sprintf("join %d→%d", n, n+1), p, su.Keys/(n+1), w), nil
}

// Timeline runs the pool through the sequence, one phase each:
// su.Workers (10) workers in the policy's steady state, a join (→11), two graceful
// leaves (→10, →9), a crash (→8), then a rolling restart of every
// remaining worker (each leaves, returns under the same id 10s later,
// and the next goes 20s after that).
func Timeline(ctx context.Context, p Policy, su Setup) (_ []Row, err error) {
	su = su.withDefaults()
	join, s, err := runJoin(ctx, p, su)
	if err != nil {
		return nil, err
	}
	defer closeSim(s, &err)
	rows := []Row{join}
	n := su.Workers + 1
	for i := range 2 {
		w := s.Mark()
		if err := s.Leave(ctx, WorkerID(i)); err != nil {
			return nil, err
		}
		if err := s.RunFor(ctx, su.Phase); err != nil {
			return nil, err
		}
		rows = append(rows, su.row(s, fmt.Sprintf("leave %d→%d", n, n-1), p, su.Keys/n, w))
		n--
	}

	w := s.Mark()
	if err := s.Crash(WorkerID(2)); err != nil {
		return nil, err
	}
	if err := s.RunFor(ctx, su.Phase); err != nil {
		return nil, err
	}
	rows = append(rows, su.row(s, fmt.Sprintf("crash %d→%d", n, n-1), p, su.Keys/n, w))
	n--

	row, err := su.rollingRestart(ctx, s, p, n)
	if err != nil {
		return nil, err
	}
	return append(rows, row), nil
}

// rollingRestart restarts every active worker in turn. Its MinMoves is
// 2K: each worker's share must leave it while it is down, and as much
// must come back to it for the pool to be balanced again. Converged
// counts from the last worker's return.
func (su Setup) rollingRestart(ctx context.Context, s *Sim, p Policy, n int) (Row, error) {
	w := s.Mark()
	var last Window
	for _, id := range s.Active() {
		if err := s.Leave(ctx, id); err != nil {
			return Row{}, err
		}
		if err := s.RunFor(ctx, 10*time.Second); err != nil {
			return Row{}, err
		}
		last = s.Mark()
		if err := s.Join(ctx, id); err != nil {
			return Row{}, err
		}
		if err := s.RunFor(ctx, 20*time.Second); err != nil {
			return Row{}, err
		}
	}
	if err := s.RunFor(ctx, su.Phase); err != nil {
		return Row{}, err
	}
	row := su.row(s, fmt.Sprintf("rolling restart of %d", n), p, 2*su.Keys, w)
	row.Converged = s.Stats(last, Tolerance).Converged
	return row, nil
}

// Table formats rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| scenario | keys | policy | moves (min) | ×min | rounds to ±10% | max unowned | crash → owned | bounces | fresh sheds | end min–max | idle | overlaps |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		ratio, rounds, recovery := "–", "never", "–"
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
		fmt.Fprintf(&b, "| %s | %d | %s | %d (%d) | %s | %s | %v | %s | %d | %d | %d–%d | %d | %d |\n",
			r.Scenario, r.Keys, r.Policy, r.Moves, r.MinMoves, ratio, rounds, r.MaxUnowned.Round(100*time.Millisecond), recovery,
			r.Bounces, r.FreshSheds, r.Min, r.Max, r.Idle, r.Overlaps)
	}
	return b.String()
}
