package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The freeze-wrapper fault on a real store: a replica whose key's work
// runs as a child (through a guard, as `tenure run` runs a command) is
// frozen long enough for a peer to take the key. One key, so the child is
// the only work; the seed is one whose first freeze lasts at least 3 TTL,
// well past the holder's expiry + grace.

func freezeRun(t *testing.T, adjust func(*Options)) *Report {
	t.Helper()
	if testing.Short() {
		t.Skip("runs replicas under a fault for seconds")
	}
	kinds := []string{FaultFreezeWrapper}
	opts := Options{
		Store:    "sqlite:" + filepath.Join(t.TempDir(), "leases.db"),
		Duration: time.Second, // one step: it runs to its end once begun
		Keys:     1,
		Faults:   kinds,
		Seed:     longFreezeSeed(t, kinds, 3),
	}
	return oneStepRun(t, opts, adjust)
}

// keptHistoryDir is where a test keeps its run's history. When
// TENURE_CHAOS_HISTORY names a directory it is a new one under it per run,
// so that -count=N keeps every run's. Otherwise, with always, a temporary
// one the test removes unless it fails; else "" (Run's own temporary one,
// kept only when the run fails).
func keptHistoryDir(t *testing.T, always bool) string {
	root := os.Getenv("TENURE_CHAOS_HISTORY")
	if root == "" {
		if !always {
			return ""
		}
		dir, err := os.MkdirTemp("", "tenure-chaos-*")
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	parent := filepath.Join(root, t.Name())
	if err := os.MkdirAll(parent, 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(parent, "run-*")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// removeHistoryIfPassed removes a run's history once the test is over,
// unless the test failed or TENURE_CHAOS_HISTORY asked to keep it.
func removeHistoryIfPassed(t *testing.T, dir string) {
	t.Cleanup(func() {
		if os.Getenv("TENURE_CHAOS_HISTORY") != "" {
			return // asked for
		}
		if t.Failed() {
			t.Logf("history kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
}

// oneStepRun runs opts, changed by adjust, keeping its history under
// TENURE_CHAOS_HISTORY when set (else a failed test's).
func oneStepRun(t *testing.T, opts Options, adjust func(*Options)) *Report {
	t.Helper()
	if adjust != nil {
		adjust(&opts)
	}
	opts.HistoryDir = keptHistoryDir(t, false)
	rep, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.HistoryDir != "" {
		removeHistoryIfPassed(t, rep.HistoryDir)
	}
	return rep
}

// longFreezeSeed is the first seed whose first step freezes for at least
// ttls TTL.
func longFreezeSeed(t *testing.T, kinds []string, ttls float64) uint64 {
	t.Helper()
	tm := DefaultTiming()
	for seed := uint64(1); seed < 1000; seed++ {
		if s := newPlanner(seed, tm, 1, kinds).next(); s.Dur >= time.Duration(ttls*float64(tm.TTL)) {
			return seed
		}
	}
	t.Fatal("no seed draws a long enough freeze")
	return 0
}

func TestAFrozenWrappersChildIsStoppedByItsGuardBeforeAPeerStarts(t *testing.T) {
	rep := freezeRun(t, nil)
	if !rep.OK() {
		t.Fatalf("violations:\n%s", text(rep))
	}
	w := rep.WrapperFreezes
	if w.N != 1 || w.Children != 1 || w.GuardStops != 1 || w.TakenOver != 1 || rep.Margin.N == 0 {
		t.Fatalf("freezes %+v, margins %d; want one child stopped by its guard, then taken over, and its margin checked:\n%s",
			w, rep.Margin.N, text(rep))
	}
	if got := w.AfterDeadline.Max; got < 0 || got > MarginTolerance {
		t.Errorf("the child stopped %v after its guard's deadline; want within %v", got, MarginTolerance)
	}
	t.Logf("as expected:\n%s", text(rep))
}

// TestARunCatchesAChildThatOutlivesItsFrozenWrapper proves the check can
// fail: children started without a deadline for their guard, as `tenure
// run` started them before the guard learned deadlines, work on while
// their wrapper is frozen, and a peer's child starts meanwhile.
func TestARunCatchesAChildThatOutlivesItsFrozenWrapper(t *testing.T) {
	rep := freezeRun(t, func(o *Options) { o.childNoDeadline = true })
	overlaps := violations(rep, InvOverlap)
	if len(overlaps) == 0 {
		t.Fatalf("the child that outlived its frozen wrapper went unnoticed:\n%s", text(rep))
	}
	if w := rep.WrapperFreezes; w.N != 1 || w.Children != 1 || w.GuardStops != 0 || w.TakenOver != 1 {
		t.Errorf("freezes %+v; want one child, not stopped while its wrapper was frozen, and taken over", w)
	}
	// Nothing excuses it: the child was never frozen.
	if rep.PauseOverlaps != 0 {
		t.Errorf("%d overlaps excused as a frozen holder's", rep.PauseOverlaps)
	}
	if rep.HistoryDir == "" {
		t.Fatal("a failed run did not keep its history")
	}
	again, err := LoadHistory(rep.HistoryDir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Check(again).Violations); n != len(rep.Violations) {
		t.Errorf("checking the kept history again found %d violations, the run %d", n, len(rep.Violations))
	}
	t.Logf("as expected (overlap %v):\n%s", overlaps[0].Amount, text(rep))
}
