package main_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// A frozen tenure (SIGSTOP here; a starved or deadlocked process is the
// same to its peers) cannot stop its command, and its peer takes the key
// at expiry + grace. The guard must stop the command on its own at the
// lease's safety deadline, before the peer's command starts.

func TestFrozenHoldersCommandIsStoppedByItsGuardBeforeAPeerStartsOnSQLite(t *testing.T) {
	dir := t.TempDir()
	testFrozenHolder(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir)
}

func TestFrozenHoldersCommandIsStoppedByItsGuardBeforeAPeerStartsOnPostgres(t *testing.T) {
	testFrozenHolder(t, postgresTable(t, "cli_frozen"), t.TempDir())
}

func testFrozenHolder(t *testing.T, url, dir string) {
	log := filepath.Join(dir, "commands.log")
	byPid := map[int]*proc{}
	for i := 1; i <= 2; i++ {
		p := start(t, childEnv("record", log), "run", "--key", "frozen", "--store", url, "--owner", fmt.Sprintf("replica-%d", i),
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
		byPid[p.cmd.Process.Pid] = p
	}
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	// The command's parent is its guard, whose parent is tenure: freeze
	// tenure alone, as a stall would, and leave the guard running.
	guard := testenv.ParentPid(t, first.pid)
	holder := byPid[testenv.ParentPid(t, guard)]
	if holder == nil {
		t.Fatalf("the command's grandparent is not one of the tenure processes")
	}

	// Several renewal rounds, each moving the deadline the guard enforces:
	// the command must run on undisturbed.
	time.Sleep(2 * ttl)
	if evs := readChildLog(t, log); len(evs) != 1 {
		t.Fatalf("while the holder renewed, its command was stopped or another started: %+v", evs)
	}

	frozenAt := time.Now()
	if err := syscall.Kill(holder.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(holder.cmd.Process.Pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	evs := waitStarts(t, log, 2, ttl+grace+5*time.Second)
	if state := testenv.ProcState(holder.cmd.Process.Pid); state != 'T' {
		t.Fatalf("the holder's tenure is in state %q, not stopped, when the peer started", state)
	}
	// One append-only file orders the events: the holder's command must
	// have logged its stop before the peer's command logged its start.
	stopAt, peerAt := -1, -1
	for i, ev := range evs {
		switch {
		case ev.what == "stop" && ev.pid == first.pid:
			stopAt = i
		case ev.what == "start" && ev.pid != first.pid && peerAt < 0:
			peerAt = i
		}
	}
	if stopAt < 0 || stopAt > peerAt {
		t.Fatalf("the frozen holder's command was not stopped before the peer's started: %+v", evs)
	}
	stop, peer := evs[stopAt], evs[peerAt]
	if holderOwner := first.owner; peer.owner == holderOwner {
		t.Fatalf("the frozen holder started again: %+v", evs)
	}
	// The last confirmed renewal came at most ttl/3 before the freeze, so
	// the deadline fell at most ttl - ttl/3 after it.
	if after := stop.at.Sub(frozenAt); after > ttl {
		t.Errorf("the command stopped %v after the freeze, later than ttl", after)
	}
	// Stopped at the deadline, the command ends ttl/3 + grace before the
	// peer may start; allow a third of that for stopping on a busy machine.
	if margin := peer.at.Sub(stop.at); margin < grace {
		t.Errorf("the peer's command started only %v after the frozen holder's stopped, want at least %v", margin, grace)
	}
	t.Logf("frozen holder's command stopped %v after the freeze; the peer's started %v after that", stop.at.Sub(frozenAt), peer.at.Sub(stop.at))
	waitGone(t, time.Second, first.pid, first.grand)

	// Resumed, the holder finds its deadline passed and the key taken: it
	// must not start its command again while the peer holds the key.
	resume()
	waitOutput(t, holder, "lease lost", 5*time.Second)
	time.Sleep(ttl) // a few of its renewal and acquisition rounds
	evs = readChildLog(t, log)
	starts := 0
	for _, ev := range evs {
		if ev.what == "start" {
			starts++
		}
	}
	if starts != 2 || !testenv.Alive(peer.pid) {
		t.Fatalf("after SIGCONT: %d starts, peer's command alive %v; want 2 and true: %+v", starts, testenv.Alive(peer.pid), evs)
	}
	checkNoOverlap(t, evs, nil)
}

// waitOutput waits until p has written want.
func waitOutput(t *testing.T, p *proc, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("tenure did not write %q within %v; output:\n%s", want, within, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
