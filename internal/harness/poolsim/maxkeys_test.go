package poolsim

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

// Replicas may set different key limits (--max). Each planned with its own
// limit for every worker, as the limit was not in the store, so the
// uncapped replicas saw a replica capped below its band as low for good:
// they kept handing it keys, it shed them above its limit, and keys moved
// for as long as the pool ran (31 keys over 3 workers, one capped at 8:
// every window of four minutes had keys released and moved). Each
// membership now carries its worker's limit, so every worker plans with
// the same shares and the pool settles.
func TestReplicasWithDifferentKeyLimitsSettle(t *testing.T) {
	t.Parallel()
	for _, push := range []bool{false, true} {
		t.Run(fmt.Sprintf("push=%v", push), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				limits := map[string]int{"w00": 8, "w02": 40}
				s, err := New(Config{Keys: Keys(31), MaxKeys: limits, Seed: 3, Push: push})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := s.Close(); err != nil {
						t.Error(err)
					}
				}()
				ids := workerIDs(3)
				for i, id := range ids {
					s.JoinAt(s.Now().Add(time.Duration(i)*s.cfg.ClaimInterval/3), id)
				}
				if err := s.RunFor(t.Context(), 4*time.Minute); err != nil {
					t.Fatal(err)
				}
				w := s.Mark()
				if err := s.RunFor(t.Context(), 4*time.Minute); err != nil {
					t.Fatal(err)
				}
				st := s.Stats(w, Tolerance)
				t.Logf("push %v, four settled minutes: %d keys released, %d moved, %d running nowhere at the end (ends at %v)",
					push, st.Released, st.Moves, st.Unowned, st.End.Counts)
				if st.Released != 0 || st.Moves != 0 || st.Unowned != 0 || st.Overlaps != 0 {
					t.Errorf("push %v: once settled, %d keys released, %d moved, %d running nowhere, %d overlaps; want none (ends at %v)",
						push, st.Released, st.Moves, st.Unowned, st.Overlaps, st.End.Counts)
				}
				active := make([]balance.Worker, 0, len(ids))
				for _, id := range ids {
					active = append(active, balance.Worker{ID: id, Weight: 1, MaxKeys: limits[id]})
				}
				shares := balance.Shares(balance.Config{}, active, 31)
				for _, id := range ids {
					if n, sh := st.End.Counts[id], shares[id]; n < sh.Low || n > sh.Cap {
						t.Errorf("push %v: %s ends with %d keys, its band %d to %d (all: %v)", push, id, n, sh.Low, sh.Cap, st.End.Counts)
					}
				}
			})
		})
	}
}
