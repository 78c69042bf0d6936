package main_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store/mysql"
)

func TestPauseStopsTheCommandEverywhereUntilResumeOnSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testPause(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir)
}

func TestPauseStopsTheCommandEverywhereUntilResumeOnPostgres(t *testing.T) {
	t.Parallel()
	testPause(t, postgresTable(t, "cli_pause"), t.TempDir())
}

// testPause runs two replicas of one key, pauses it (the command stops,
// the lease is released, neither replica starts it again), then resumes
// it (one replica runs it again).
func testPause(t *testing.T, url, dir string) {
	log := filepath.Join(dir, "commands.log")
	for _, owner := range []string{"a", "b"} {
		start(t, childEnv("record", log), "run", "--key", "report", "--store", url, "--owner", owner,
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	}
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	if stdout, stderr, code := runTenure(t, nil, "pause", "--key", "report", "--store", url); code != 0 || !strings.Contains(stdout, "paused report") {
		t.Fatalf("pause: exit %d %s%s", code, stdout, stderr)
	}
	paused := time.Now()
	waitGone(t, ttl, first.pid) // within a renewal round (ttl/3), stop timeout included
	t.Logf("the command stopped %v after the pause", time.Since(paused).Round(time.Millisecond))
	time.Sleep(2 * ttl) // neither replica starts it while paused
	if evs := readChildLog(t, log); len(evs) != 2 || evs[1].what != "stop" {
		t.Fatalf("while paused: %+v, want the first run and its stop only", evs)
	}
	stdout, _, _ := runTenure(t, nil, "status", "--store", url)
	if !strings.Contains(stdout, "paused (tenure resume --key KEY): report") || strings.Contains(stdout, " held ") {
		t.Errorf("status while paused:\n%s", stdout)
	}

	if stdout, stderr, code := runTenure(t, nil, "resume", "--key", "report", "--store", url); code != 0 || !strings.Contains(stdout, "resumed report") {
		t.Fatalf("resume: exit %d %s%s", code, stdout, stderr)
	}
	resumed := time.Now()
	evs := waitStarts(t, log, 2, 3*ttl) // a round and a start, which is slow under -race (see testMove)
	t.Logf("running again %v after the resume", evs[len(evs)-1].at.Sub(resumed).Round(time.Millisecond))
}

// TestPauseAndResumeOnEveryStore: the pause record is an ordinary lease
// record, so every store keeps it.
func TestPauseAndResumeOnEveryStore(t *testing.T) {
	t.Parallel()
	urls := map[string]func(t *testing.T) string{
		"mysql": func(t *testing.T) string {
			base := testenv.MySQL.URL(t)
			table := testenv.UniqueName("cli_pause_")
			t.Cleanup(func() { dropMySQLTable(t, base, table) })
			return base + "?table=" + table
		},
		"redis": func(t *testing.T) string {
			base := testenv.Redis.URL(t)
			ns := testenv.UniqueName("cli_pause_")
			t.Cleanup(func() { deleteNamespace(t, base, ns) })
			return base + "?namespace=" + ns
		},
		"etcd": func(t *testing.T) string {
			return testenv.Etcd.URL(t) + "?prefix=" + testenv.UniqueName("cli_pause_")
		},
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := url(t)
			if stdout, stderr, code := runTenure(t, nil, "pause", "--key", "report", "--store", u); code != 0 {
				t.Fatalf("pause: exit %d %s%s", code, stdout, stderr)
			}
			if stdout, _, _ := runTenure(t, nil, "status", "--store", u); !strings.Contains(stdout, "paused (tenure resume --key KEY): report") {
				t.Errorf("status after pause:\n%s", stdout)
			}
			if stdout, _, code := runTenure(t, nil, "resume", "--key", "report", "--store", u); code != 0 || !strings.Contains(stdout, "resumed report") {
				t.Errorf("resume: exit %d %s", code, stdout)
			}
			if stdout, _, _ := runTenure(t, nil, "status", "--store", u); strings.Contains(stdout, "paused") {
				t.Errorf("status after resume still says paused:\n%s", stdout)
			}
		})
	}
}

// dropMySQLTable removes a test's lease table from MySQL, with the
// session table the store keeps beside it.
func dropMySQLTable(t *testing.T, url, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := mysql.Open(ctx, url, mysql.Options{Table: table})
	if err == nil {
		err = errors.Join(s.Drop(ctx), s.Close())
	}
	if err != nil {
		t.Logf("drop %s: %v", table, err)
	}
}
