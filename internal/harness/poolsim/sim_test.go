package poolsim

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

var defaults = BalancedPolicy("balanced", balance.Config{})

// short keeps scenario tests quick under -race. The warm-up stays at its
// default (4 min): Balanced needs a MinHold and a few rounds after a start
// to settle, and an event on an unsettled pool measures the start.
func short(keys int) Setup {
	return Setup{Keys: keys, Seed: 1, Phase: 90 * time.Second}
}

func TestNoTwoWorkersEverHoldTheSameKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Policy
		push bool
	}{
		{"balanced polling", defaults, false},
		{"balanced push", defaults, true},
		{"reference", ReferencePolicy(ReferenceConfig{}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				su := short(400)
				su.Push = tc.push
				rows, err := Timeline(t.Context(), tc.p, su)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if r.Overlaps != 0 || r.Lost != 0 || r.DeadlineStops != 0 {
						t.Errorf("%s: %d overlaps, %d leases lost, %d runners stopped at their deadline", r.Scenario, r.Overlaps, r.Lost, r.DeadlineStops)
					}
					// Keys in flight at the end are fine; keys left behind are
					// not. A crashed worker's keys run nowhere until its lease
					// expires (TTL after its last renewal, up to a round before
					// the crash), grace ends and a peer's round sees them.
					if bound := 10*time.Second + 15*time.Second + 5*time.Second; r.MaxUnowned > bound {
						t.Errorf("%s: a key ran nowhere for %v, want ≤ %v", r.Scenario, r.MaxUnowned, bound)
					}
				}
			})
		})
	}
}

func TestTheOverlapCheckCatchesAKeyTakenBehindAWorkersBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{Keys: Keys(20), Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.StartAll(t.Context(), []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		if err := s.RunFor(t.Context(), time.Minute); err != nil {
			t.Fatal(err)
		}
		if got := s.Totals().Overlaps; got != 0 {
			t.Fatalf("%d overlaps before anything was staged", got)
		}
		// A newer term for another owner of a key a worker runs and still
		// believes in, staged behind its back.
		s.Store().Put(store.Lease{Key: poolkey.Key("", PoolName, "acct-00000"), Owner: "intruder", Epoch: 99, TimeLeft: time.Minute})
		s.sample(t.Context()) // before the worker's next renewal tells it the key is lost
		if got := s.Totals().Overlaps; got == 0 {
			t.Fatal("a key taken behind a worker's back went unnoticed")
		}
	})
}

func TestAGracefulLeaveFreesItsKeysForPeersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{Keys: Keys(100), Seed: 1, Push: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.StartAll(t.Context(), []string{"a", "b", "c"}); err != nil {
			t.Fatal(err)
		}
		if err := s.RunFor(t.Context(), time.Minute); err != nil {
			t.Fatal(err)
		}
		w := s.Mark()
		if err := s.Leave(t.Context(), "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.RunFor(t.Context(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		st := s.Stats(w, Tolerance)
		// Pushed releases reach the preferred peers in the same instant;
		// keys beyond a preferred peer's cap wait at most one orphan delay
		// (7.5s) for a peer that saw them free before the preferred one
		// filled up.
		if st.Unowned != 0 || st.MaxUnowned > 7500*time.Millisecond || st.Moves == 0 {
			t.Fatalf("after a graceful leave: %d unowned, longest wait %v, %d moves", st.Unowned, st.MaxUnowned, st.Moves)
		}
	})
}
