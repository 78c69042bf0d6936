package main_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func TestACrashLoopingReplicaHandsTheKeyToAHealthyPeerOnSQLite(t *testing.T) {
	dir := t.TempDir()
	testCrashLoop(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir)
}

func TestACrashLoopingReplicaHandsTheKeyToAHealthyPeerOnPostgres(t *testing.T) {
	testCrashLoop(t, postgresTable(t, "cli_crashloop"), t.TempDir())
}

// testCrashLoop starts a replica whose command fails at once, every time
// (a host missing a file), then a healthy one: after --max-failures
// failures within --failure-window (defaults: 3 within 8×ttl/3) the bad
// replica releases the key, and the healthy one runs the command within
// the window + 1s of the first failure, where before it waited until the
// bad replica was stopped by hand.
func testCrashLoop(t *testing.T, url, dir string) {
	log := filepath.Join(dir, "commands.log")
	args := func(owner string) []string {
		return []string{"run", "--key", "job", "--store", url, "--owner", owner,
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t)}
	}
	bad := start(t, childEnv("exit:3", log), args("bad")...)
	waitOutput(t, bad, "runner failed", 10*time.Second)
	firstFailure := time.Now()
	start(t, childEnv("record", log), args("good")...)

	window := 8 * ttl / 3
	got := waitStarts(t, log, 1, window+time.Second)[0]
	took := got.at.Sub(firstFailure)
	t.Logf("the healthy replica ran the command %v after the first failure (failure window %v)", took.Round(time.Millisecond), window)
	if took > window+time.Second {
		t.Fatalf("the healthy replica started %v after the first failure, want within the failure window + 1s (%v)", took, window+time.Second)
	}
	if got.owner != "good" {
		t.Fatalf("the command ran under %q, want the healthy replica", got.owner)
	}
	waitOutput(t, bad, "handing the key over to a peer", time.Second)
	// The bad replica stays out for its cooldown (4×ttl): the key stays
	// with the healthy one.
	time.Sleep(2 * ttl)
	if evs := readChildLog(t, log); len(evs) != 1 || evs[0].owner != "good" {
		t.Fatalf("after the handover: %+v, want the healthy replica's one run", evs)
	}
}

// TestSIGHUPIsPassedOnAndNeverHandsOver: with --pass-sighup, SIGHUP reaches the
// command as a reload, and the command keeps running under the same term.
func TestSIGHUPIsPassedOnAndNeverHandsOver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "commands.log")
	p := start(t, childEnv("record", log), "run", "--key", "reloadable", "--store", "sqlite:"+filepath.Join(dir, "leases.db"),
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--pass-sighup", "--", self(t))
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for countHups(t, log) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the command never got the SIGHUP; tenure said:\n%s", p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(ttl) // a stop, had SIGHUP meant one, would show by now
	evs := readChildLog(t, log)
	if len(evs) != 1 || evs[0].pid != first.pid {
		t.Fatalf("after SIGHUP: %+v, want the first run going on", evs)
	}
	// Only the command got it: its helper (the grandchild, which would
	// die of a SIGHUP) lives on.
	if !testenv.Alive(first.grand) {
		t.Fatal("SIGHUP reached the command's whole group: its helper died")
	}
	select {
	case <-p.done:
		t.Fatalf("tenure exited on SIGHUP:\n%s", p.out.String())
	default:
	}
}

// TestSIGHUPWithoutPassSighupLeavesTheCommandAlone: by default SIGHUP
// neither stops the command nor reaches it.
func TestSIGHUPWithoutPassSighupLeavesTheCommandAlone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "commands.log")
	p := start(t, childEnv("record", log), "run", "--key", "steady", "--store", "sqlite:"+filepath.Join(dir, "leases.db"),
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p, "SIGHUP: nothing to reload", 5*time.Second)
	time.Sleep(ttl)
	if evs := readChildLog(t, log); len(evs) != 1 || evs[0].pid != first.pid || countHups(t, log) != 0 {
		t.Fatalf("after SIGHUP: %+v and %d SIGHUPs passed on; want the first run untouched", evs, countHups(t, log))
	}
}
