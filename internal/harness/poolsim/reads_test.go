package poolsim

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// readsAtRest starts workers on a push store, lets them settle and
// reports what one minute at rest costs the store in reads.
func readsAtRest(t *testing.T, keys, workers int, fullReadEvery time.Duration) Stats {
	s, err := New(Config{Keys: Keys(keys), Seed: 1, Push: true, FullReadEvery: fullReadEvery})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := s.StartAll(t.Context(), workerIDs(workers)); err != nil {
		t.Fatal(err)
	}
	if err := s.RunFor(t.Context(), 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	w := s.Mark()
	if err := s.RunFor(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	st := s.Stats(w, Tolerance)
	if st.Overlaps != 0 || st.Unowned != 0 || st.Idle != 0 {
		t.Errorf("full read every %v: %d overlaps, %d keys unowned, %d workers idle", fullReadEvery, st.Overlaps, st.Unowned, st.Idle)
	}
	return st
}

func TestOnAPushStoreAWorkerAtRestReadsTheMembershipsNotEveryKey(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const keys, workers = 1000, 10
		every := readsAtRest(t, keys, workers, 5*time.Second) // the default round
		following := readsAtRest(t, keys, workers, 0)
		// Every round reads all keys and memberships: 12 rounds a minute.
		if min := 12 * workers * (keys + workers); every.RowsRead < min {
			t.Fatalf("reading every round: %d rows in a minute, want at least %d", every.RowsRead, min)
		}
		// Following: one whole read a minute, then the memberships.
		if max := 2 * workers * (keys + workers); following.RowsRead > max {
			t.Errorf("following the push channel: %d rows in a minute (%d reads), want at most %d; every round: %d",
				following.RowsRead, following.Lists, max, every.RowsRead)
		}
		t.Logf("rows read in a minute at rest, %d keys, %d workers: %d every round, %d following (%d reads)",
			keys, workers, every.RowsRead, following.RowsRead, following.Lists)
	})
}

// TestReadsReport prints the "Pools: reads of the lease table" figures of
// BENCHMARKS.md. It runs only when asked for by name:
//
//	go test ./internal/harness/poolsim -run TestReadsReport -v
func TestReadsReport(t *testing.T) {
	testenv.ReportOnly(t)
	for _, size := range []struct{ keys, workers int }{{10_000, 10}, {10_000, 30}} {
		// A subtest each: synctest.Test does not run on a t that failed.
		t.Run(fmt.Sprintf("%dx%d", size.keys, size.workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				every := readsAtRest(t, size.keys, size.workers, 5*time.Second)
				following := readsAtRest(t, size.keys, size.workers, 0)
				t.Logf("| %d | %d | %d | %d | %d | %d |", size.keys, size.workers,
					every.Lists, every.RowsRead, following.Lists, following.RowsRead)
			})
		})
	}
}
