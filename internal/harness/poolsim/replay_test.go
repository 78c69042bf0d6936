package poolsim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// TestJoinReplayReport replays the 1,000-key join of seeds 1–3 many times,
// with push and without. Goroutines that act in one instant interleave
// differently from run to run, so one run of a seed is one outcome among
// several, and a rare bad one shows only in a replay:
//
//	go test ./internal/harness/poolsim -run TestJoinReplayReport -v   # ~20 s
//
// POOLSIM_REPLAYS sets the runs per seed and store (default 15).
func TestJoinReplayReport(t *testing.T) {
	testenv.ReportOnly(t)
	replays := testenv.PositiveInt(t, "POOLSIM_REPLAYS", 15)
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		fmt.Fprintf(&out, "| store | joins | moves for 90: min / median / max | rounds to ±10 %%: max | never within ±10 %% |\n|---|---:|---|---:|---:|\n")
		for _, push := range []bool{false, true} {
			var moves []int
			worst, never := 0, 0
			for range replays {
				for _, r := range joinRounds(t, defaults, push, 3) {
					moves = append(moves, r.Moves)
					if n := r.RoundsToConverge(); n < 0 {
						never++
					} else {
						worst = max(worst, n)
					}
				}
			}
			slices.Sort(moves)
			store := "polling"
			if push {
				store = "push"
			}
			fmt.Fprintf(&out, "| %s | %d | %d / %d / %d | %d | %d |\n", store, len(moves), moves[0], moves[len(moves)/2], moves[len(moves)-1], worst, never)
		}
		t.Log("\n" + out.String())
	})
}
