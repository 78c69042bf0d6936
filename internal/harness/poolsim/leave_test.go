package poolsim

import (
	"testing"
	"testing/synctest"
	"time"
)

// leaveWithBuffer runs 1200 keys on 3 workers on a push store whose watch
// buffer is that of the PostgreSQL and etcd stores (256), lets w02 leave
// gracefully — 400 releases at once, more than the buffer holds — and
// reports the longest spell a key ran nowhere.
func leaveWithBuffer(t *testing.T, fullReadEvery time.Duration) Stats {
	s, err := New(Config{Keys: Keys(1200), Seed: 1, Push: true, FullReadEvery: fullReadEvery, WatchBuffer: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.StartAll(t.Context(), workerIDs(3)); err != nil {
		t.Fatal(err)
	}
	if err := s.RunFor(t.Context(), 4*time.Minute+20*time.Second); err != nil {
		t.Fatal(err)
	}
	w := s.Mark()
	if err := s.Leave(t.Context(), "w02"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		if err := s.RunFor(t.Context(), time.Second); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range s.counts().Counts {
			n += c
		}
		if n == 1200 || time.Since(start) > 2*time.Minute {
			t.Logf("full read every %v: all %d keys run again %v after the leave", fullReadEvery, n, time.Since(start))
			break
		}
	}
	return s.Stats(w, Tolerance)
}

func TestAGracefulLeaveWhoseReleasesOverflowTheWatchIsHandedOverAsFastAsReadingEveryRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		every := leaveWithBuffer(t, 5*time.Second)
		following := leaveWithBuffer(t, 0)
		t.Logf("longest unowned after a graceful leave: %v reading every round (%+v), %v following (%+v)", every.MaxUnowned, every.Totals, following.MaxUnowned, following.Totals)
		// Workers racing in one instant sometimes hand a few keys over
		// after the leave, in either mode; such a key waits out the
		// engine's orphan delay (1.5 rounds). A leave whose releases
		// were lost waited 17-24 s.
		round := 5 * time.Second // the simulator's default ClaimInterval
		limit := max(every.MaxUnowned, 3*round/2) + round/2
		if following.MaxUnowned > limit {
			t.Errorf("following: a released key waited %v to run again, reading every round %v", following.MaxUnowned, every.MaxUnowned)
		}
	})
}
