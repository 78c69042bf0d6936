package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// tenure verify on SQLite: real replica processes (this binary re-run as
// its hidden replica subcommand) under faults for 15 seconds, every
// invariant holding, a report and an SVG timeline.
func TestVerifyRunsReplicasUnderFaultsAndReportsEveryInvariantHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 15s")
	}
	t.Parallel()
	dir := t.TempDir()
	svg := filepath.Join(dir, "run.svg")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // 15s of faults, plus start-up on a loaded machine
	defer cancel()
	cmd := exec.CommandContext(ctx, tenureBin, "verify", "--store", "sqlite:"+filepath.Join(dir, "v.db"),
		"--duration", "15s", "--seed", "7", "--replicas", "3", "--keys", "2", "--timeline", svg)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	out, errOut, code := o.String(), e.String(), cmd.ProcessState.ExitCode()
	if code != 0 {
		t.Fatalf("verify exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"seed", "7"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil || !strings.Contains(string(data), "<svg") {
		t.Fatalf("timeline: %v, %.80q", err, data)
	}
}

// tenure verify on the real MySQL/MariaDB and etcd servers: the replicas
// reach them through proxies (etcd listed as two endpoints, one proxy
// each), and the run leaves its report.
func TestVerifyRunsOnMySQLAndOnEtcdListedAsTwoEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 2×10s")
	}
	etcd := testenv.Etcd.URL(t)
	if rest, ok := strings.CutPrefix(etcd, "etcd://127.0.0.1:"); ok {
		port, _, _ := strings.Cut(rest, "/")
		etcd = "etcd://localhost:" + port + ",127.0.0.1:" + port
	}
	for name, url := range map[string]string{"mysql": testenv.MySQL.URL(t), "etcd": etcd} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, tenureBin, "verify", "--store", url,
				"--duration", "10s", "--seed", "11", "--replicas", "3", "--keys", "2")
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("verify exited %d\nstdout:\n%s\nstderr:\n%s", code, o.String(), e.String())
			}
			if !strings.Contains(o.String(), "tenure verify: PASS") || !strings.Contains(o.String(), "fenced writes") {
				t.Errorf("no report of a passing run:\n%s", o.String())
			}
		})
	}
}

func TestVerifyRefusesBadInputWithAUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"verify", "--store", "sqlite:x.db", "--duration", "1s"},
		{"verify", "--store", "sqlite:x.db", "--replicas", "1"},
		{"verify", "--store", "mysql://root:hunter2@/test?socket=/run/mysqld/mysqld.sock"},
		{"verify", "--store", "nope://x"},
	} {
		_, errOut, code := runTenure(t, nil, args...)
		if code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || strings.Contains(errOut, "hunter2") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with one line and no password", args, code, errOut)
		}
	}
}
