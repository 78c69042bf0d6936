package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func TestTwoReplicasGivenOneOwnerNameRunTheCommandOneAtATimeOnSQLite(t *testing.T) {
	dir := t.TempDir()
	testSameOwner(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir)
}

func TestTwoReplicasGivenOneOwnerNameRunTheCommandOneAtATimeOnPostgres(t *testing.T) {
	testSameOwner(t, postgresTable(t, "cli_owner"), t.TempDir())
}

// testSameOwner starts two `tenure run --owner same` on one key, as a copied
// unit file or host-networked containers sharing a hostname would: the
// command must run on one of them only, for round after round, under an
// owner id of its own; and once it is killed, on the other.
func testSameOwner(t *testing.T, url, dir string) {
	log := filepath.Join(dir, "commands.log")
	st, err := storeurl.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var procs []*proc
	for range 2 {
		procs = append(procs, start(t, childEnv("record", log), "run", "--key", "job", "--store", url, "--owner", "same",
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t)))
	}
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	time.Sleep(3 * ttl) // nine renewal rounds: the twin must not take the key meanwhile
	if evs := readChildLog(t, log); len(evs) != 1 {
		t.Fatalf("two replicas named alike ran the command %d times (stops included) in nine rounds: %+v", len(evs), evs)
	}
	l := lease(t, st, "job")
	if !l.Live || l.Owner != first.id || !strings.HasPrefix(l.Owner, "same#") {
		t.Fatalf("lease %+v, want it live under the running command's owner id %q", l, first.id)
	}
	// The holder dies; its twin takes over, under an id of its own. The
	// command's parent is the guard, whose parent is the holder.
	holderPid := testenv.ParentPid(t, testenv.ParentPid(t, first.pid))
	killed := false
	for _, p := range procs {
		if p.cmd.Process.Pid == holderPid {
			_ = p.cmd.Process.Kill()
			killed = true
		}
	}
	if !killed {
		t.Fatalf("the command %d does not descend from either tenure process", first.pid)
	}
	second := waitStarts(t, log, 2, ttl+grace+5*time.Second)[1]
	if second.id == first.id || second.owner != "same" {
		t.Fatalf("after the kill the command runs as %q, first ran as %q", second.id, first.id)
	}
}
