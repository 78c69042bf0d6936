package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMoveHandsTheCommandToTheNamedReplicaOnSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testMove(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir)
}

func TestMoveHandsTheCommandToTheNamedReplicaOnPostgres(t *testing.T) {
	t.Parallel()
	testMove(t, postgresTable(t, "cli_move"), t.TempDir())
}

// testMove runs three replicas of one key and moves it from its holder to
// one named replica: the holder stops its command, the named one starts
// it, the third never does.
func testMove(t *testing.T, url, dir string) {
	log := filepath.Join(dir, "commands.log")
	run := func(owner string) {
		start(t, childEnv("record", log), "run", "--key", "poller", "--store", url, "--owner", owner,
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	}
	run("a")
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	for _, owner := range []string{"a", "b", "c"} {
		if owner != first.owner {
			run(owner)
		}
	}
	target := "b"
	if first.owner == "b" {
		target = "c"
	}
	time.Sleep(ttl / 2) // the others are watching
	stdout, stderr, code := runTenure(t, nil, "move", "--key", "poller", "--to", target, "--store", url)
	if code != 0 || !strings.Contains(stdout, "moving poller from "+first.id+" to "+target) {
		t.Fatalf("move: exit %d %s%s", code, stdout, stderr)
	}
	moved := time.Now()
	// Within a round, the stop timeout and a start, which for the test
	// binary re-run as the command can take a second on a loaded two-core
	// machine under -race (CI once saw 1 of 2 starts after 2s). The time
	// it takes is measured in BENCHMARKS.md, not judged here.
	evs := waitStarts(t, log, 2, 3*ttl)
	second := evs[len(evs)-1]
	t.Logf("running on %s %v after the move", second.owner, second.at.Sub(moved).Round(time.Millisecond))
	if second.owner != target {
		t.Fatalf("the command moved to %s, want %s: %+v", second.owner, target, evs)
	}
	if status, _, _ := runTenure(t, nil, "status", "--store", url); !strings.Contains(status, "moving poller from "+first.id+" to "+target) {
		t.Errorf("status during the move:\n%s", status)
	}
	time.Sleep(ttl)
	if evs := readChildLog(t, log); len(evs) != 3 { // a's start and stop, the target's start
		t.Fatalf("after the move: %+v, want a's run, its stop and %s's run", evs, target)
	}
}
