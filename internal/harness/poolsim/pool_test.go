package poolsim

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

func TestANewWorkerGetsItsShareUnderBalancedButStaysIdleUnderReference(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const keys = 1000
		fair := float64(keys) / 11 // 91

		row, err := Join(t.Context(), defaults, short(keys))
		if err != nil {
			t.Fatal(err)
		}
		if got := row.End.Counts["w10"]; math.Abs(float64(got)-fair) > 0.2*fair {
			t.Errorf("balanced: the newcomer holds %d keys, want %.0f ± 20%% (all: %v)", got, fair, row.End.Counts)
		}
		if row.Overlaps != 0 {
			t.Errorf("balanced: %d overlaps", row.Overlaps)
		}

		su := short(keys)
		su.Phase = 3 * time.Minute // three of the reference's rebalance intervals
		row, err = Join(t.Context(), ReferencePolicy(ReferenceConfig{}), su)
		if err != nil {
			t.Fatal(err)
		}
		if got := row.End.Counts["w10"]; got != 0 {
			t.Errorf("reference: the newcomer holds %d keys, want 0 (it is idle)", got)
		}
		threshold := Threshold(keys, 11)
		for id, n := range row.End.Counts {
			if id != "w10" && (n != 100 || n > threshold) {
				t.Errorf("reference: %s holds %d keys, want the 100 it started with (under the threshold %d)", id, n, threshold)
			}
		}
		if row.Moves != 0 {
			t.Errorf("reference: %d keys moved after the join, want none", row.Moves)
		}
	})
}

func TestAfterACrashEveryKeyIsOwnedAgainWithinTTLPlusGracePlusOneRound(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, push := range []bool{false, true} {
			su := short(1000)
			su.Push = push
			_, s, err := runJoin(t.Context(), defaults, su)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			w := s.Mark()
			if err := s.Crash("w03"); err != nil {
				t.Fatal(err)
			}
			if err := s.RunFor(t.Context(), time.Minute); err != nil {
				t.Fatal(err)
			}
			st := s.Stats(w, Tolerance)
			cfg := s.Config()
			// The last renewal comes up to one round before the crash, which
			// only makes the bound looser.
			bound := cfg.TTL + cfg.Grace + cfg.ClaimInterval
			if st.Unrecovered != 0 || st.Recovery > bound || st.Recovery == 0 {
				t.Errorf("push=%v: longest crash-to-owned %v with %d keys still unowned, want every key within %v",
					push, st.Recovery, st.Unrecovered, bound)
			}
			if st.Overlaps != 0 {
				t.Errorf("push=%v: %d overlaps", push, st.Overlaps)
			}
		}
	})
}

func TestKeysShedAreNotTheOnesThatJustMoved(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		su := short(1000)
		su.Phase = 3 * time.Minute
		rows, err := Timeline(t.Context(), defaults, su)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows[:4] { // join, two leaves, crash
			if r.FreshSheds != 0 || r.Bounces != 0 {
				t.Errorf("balanced, %s: %d keys shed within MinHold of arriving, %d moved twice within it",
					r.Scenario, r.FreshSheds, r.Bounces)
			}
		}
		// The reference sheds its newest claims: exactly the keys a leave
		// just moved to it, so they move again within one of its rebalance
		// intervals (60s, plus a round).
		su.MinHold = 65 * time.Second
		rows, err = Timeline(t.Context(), ReferencePolicy(ReferenceConfig{}), su)
		if err != nil {
			t.Fatal(err)
		}
		if leave := rows[1]; leave.FreshSheds == 0 || leave.Bounces == 0 {
			t.Errorf("reference, %s: %d fresh sheds, %d bounces; its newest-first shed should bounce keys",
				leave.Scenario, leave.FreshSheds, leave.Bounces)
		}
	})
}

// joinRounds runs the 1,000-key join for seeds 1..n and returns its rows.
func joinRounds(t *testing.T, p Policy, push bool, n int) []Row {
	t.Helper()
	var rows []Row
	for seed := uint64(1); seed <= uint64(n); seed++ {
		su := Setup{Keys: 1000, Seed: seed, Push: push, Phase: 2 * time.Minute}
		r, err := Join(t.Context(), p, su)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// On a store with push every worker sees a newcomer's membership in the
// same instant, and each hands over the newcomer's preferred keys on its
// own: together they may give back more than the newcomer's cap, and the
// surplus goes to peers when its orphan delay ends. A join still settles
// within a few rounds and far below the reference's cost; the figures per
// seed are in BENCHMARKS.md.
func TestBalancedDefaultsSettleAJoinWithinSixRoundsOnAPushStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, r := range joinRounds(t, defaults, true, 3) {
			if n := r.RoundsToConverge(); n < 0 || n > 6 {
				t.Errorf("took %d rounds to bring every worker within ±10%% (end %d–%d), want ≤ 6", n, r.Min, r.Max)
			}
			if float64(r.Moves) > 1.6*float64(r.MinMoves) || r.Bounces != 0 {
				t.Errorf("%d moves (%d bounces) for a join that needs %d; want ≤ 1.6× and no bounce", r.Moves, r.Bounces, r.MinMoves)
			}
		}
	})
}

// On a store without push (SQLite across processes, MySQL) a worker sees a
// handed-over key only at its next round, up to 5s later, while a peer
// that saw it free replans when a 2s OrphanDelay ends and takes it; the
// preferred worker must then wait MinHold for it to be handed over again.
// This is why the default OrphanDelay (1.5 rounds) is longer than a
// round: this test shows the cost of a short delay and that the default
// avoids it. Goroutines interleave differently from run to run, so one
// seed's join may lose few handovers (102 moves for 90 was seen); the
// cost is asserted over the seeds together, side by side with the default.
func TestAnOrphanDelayShorterThanARoundLosesHandoversOnAPollingStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const seeds = 4
		short := BalancedPolicy("orphan delay 2s", balance.Config{OrphanDelay: 2 * time.Second})
		var shortMoves, defaultMoves, minMoves int
		for _, r := range joinRounds(t, short, false, seeds) {
			shortMoves += r.Moves
			minMoves += r.MinMoves
		}
		for _, r := range joinRounds(t, defaults, false, seeds) {
			defaultMoves += r.Moves
			if n := r.RoundsToConverge(); n < 0 || n > 3 {
				t.Errorf("default OrphanDelay: %d rounds to converge, want ≤ 3", n)
			}
			if float64(r.Moves) > 1.15*float64(r.MinMoves) {
				t.Errorf("default OrphanDelay: %d moves, want ≤ 1.15 × %d", r.Moves, r.MinMoves)
			}
		}
		if float64(shortMoves) <= 1.2*float64(minMoves) || shortMoves <= defaultMoves {
			t.Errorf("over %d joins that need %d moves: OrphanDelay 2s made %d, the default %d; expected peers to win handovers from the short delay",
				seeds, minMoves, shortMoves, defaultMoves)
		}
	})
}
