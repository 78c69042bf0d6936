package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

// readTicks reads the "tick" lines of scheduled runs: who ran, when, and
// for which period (TENURE_PERIOD, in grand).
func readTicks(t *testing.T, path string) []childEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []childEvent
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "tick ") {
			continue
		}
		var ev childEvent
		var nanos int64
		if _, err := fmt.Sscanf(line, "%s %s %d %d %d %d %s", &ev.what, &ev.owner, &ev.epoch, &ev.pid, &ev.grand, &nanos, &ev.key); err != nil {
			t.Fatalf("bad tick line %q: %v", line, err)
		}
		ev.at, ev.owner = time.Unix(0, nanos), tenure.OwnerName(ev.owner)
		out = append(out, ev)
	}
	return out
}

func TestAScheduledCommandRunsOncePerPeriodAcrossReplicasOnSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testSchedule(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir)
}

func TestAScheduledCommandRunsOncePerPeriodAcrossReplicasOnPostgres(t *testing.T) {
	t.Parallel()
	testSchedule(t, postgresTable(t, "cli_schedule"), t.TempDir())
}

// testSchedule runs two replicas of a job scheduled every 2s, kills the
// first holder, and checks that every period ran exactly once, on one
// replica, whoever held the key then.
func testSchedule(t *testing.T, url, dir string) {
	log := filepath.Join(dir, "commands.log")
	var procs []*proc
	for _, owner := range []string{"a", "b"} {
		procs = append(procs, start(t, childEnv("tick", log), "run", "--key", "every2s", "--store", url, "--owner", owner,
			"--schedule", "@every 2s", "--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t)))
	}
	began := time.Now()
	time.Sleep(7 * time.Second)
	first := readTicks(t, log)
	if len(first) == 0 {
		t.Fatal("no scheduled run in 7s")
	}
	// Kill the holder: the other replica takes over the schedule.
	holder := first[len(first)-1].owner
	for i, owner := range []string{"a", "b"} {
		if owner == holder {
			_ = procs[i].cmd.Process.Kill()
		}
	}
	time.Sleep(ttl + grace + 5*time.Second)
	ticks := readTicks(t, log)
	periods := map[int64][]string{}
	owners := map[string]bool{}
	for _, tk := range ticks {
		// The period the command was told; a run that began late (a
		// loaded machine) still belongs to it.
		p := int64(tk.grand)
		if p == 0 || p%2 != 0 || tk.at.Before(time.Unix(p, 0)) {
			t.Errorf("a run at %v was told period %d: not a 2s period it could belong to", tk.at.Format("15:04:05.000"), p)
		}
		periods[p] = append(periods[p], tk.owner)
		owners[tk.owner] = true
	}
	for p, who := range periods {
		if len(who) != 1 {
			t.Errorf("the period at %v ran %d times: %v", time.Unix(p, 0).Format("15:04:05"), len(who), who)
		}
	}
	elapsed := time.Since(began)
	// A period may go without a run while the killed holder's lease runs
	// out (ttl + grace); every other one must have run.
	if want := int(elapsed/(2*time.Second)) - int((ttl+grace)/(2*time.Second)) - 2; len(periods) < want {
		t.Errorf("%d periods ran in %v, want at least %d", len(periods), elapsed.Round(time.Second), want)
	}
	if len(owners) != 2 {
		t.Errorf("the runs were on %v; want both replicas, the second after the kill", owners)
	}
	t.Logf("%d runs in %d periods over %v, on %v", len(ticks), len(periods), elapsed.Round(time.Second), owners)
}
