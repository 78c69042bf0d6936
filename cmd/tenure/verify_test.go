package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// tenure verify on SQLite: real replica processes (this binary re-run as
// its hidden replica subcommand) under faults for 15 seconds, every
// invariant holding, the pool's keys (8 by default) checked too, a report
// and an SVG timeline.
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
	for _, want := range []string{"seed", "7", "and 8 pool keys", "and 8 keys in a pool", "pool coverage checked over"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`ok +pool keys run somewhere +\d+ checked`).MatchString(out) {
		t.Errorf("the pool's keys were not checked:\n%s", out)
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

// tenure verify --failover-cmd: the command crashes a private Redis
// (SIGKILL) and starts it again on its append-only file after
// TENURE_FAULT_DOWN, as an operator's failover script would; the run
// injects store restarts that way, among the other faults, and every
// invariant holds.
func TestVerifyFailsTheStoreOverWithTheCommandItIsGiven(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 15s")
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Unavailable(t, bin+" is not installed")
		}
	}
	t.Parallel()
	dir := t.TempDir()
	port := strings.TrimPrefix(testenv.ClosedAddr(t), "127.0.0.1:")
	script := filepath.Join(dir, "redis.sh")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
# start | crash-and-restart: a Redis that keeps every write it acknowledged
set -e
start() {
	redis-server --port `+port+` --bind 127.0.0.1 --dir `+dir+` --appendonly yes --appendfsync always \
		--save "" --daemonize yes --pidfile `+dir+`/redis.pid --logfile `+dir+`/redis.log
	until redis-cli -p `+port+` ping >/dev/null 2>&1; do sleep 0.05; done
}
case "$1" in
start) start ;;
*)
	echo "failover after ${TENURE_FAULT_DOWN}s down" >> `+dir+`/failovers.log
	kill -9 "$(cat `+dir+`/redis.pid)"
	while redis-cli -p `+port+` ping >/dev/null 2>&1; do sleep 0.05; done
	sleep "$TENURE_FAULT_DOWN"
	start ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script, "start").CombinedOutput(); err != nil {
		t.Fatalf("start redis: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if pid, err := os.ReadFile(filepath.Join(dir, "redis.pid")); err == nil {
			_ = exec.Command("kill", "-9", strings.TrimSpace(string(pid))).Run()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tenureBin, "verify", "--store", "redis://127.0.0.1:"+port+"/0",
		"--duration", "15s", "--seed", "5", "--replicas", "3", "--keys", "2",
		"--faults", "store-restart,kill", "--failover-cmd", script+" failover")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("verify exited %d\nstdout:\n%s\nstderr:\n%s", code, o.String(), e.String())
	}
	log, err := os.ReadFile(filepath.Join(dir, "failovers.log"))
	if err != nil || !strings.Contains(string(log), "s down") {
		t.Fatalf("the failover command never ran: %v %q", err, log)
	}
	if !strings.Contains(o.String(), "store-restart") {
		t.Errorf("the report counts no store restart:\n%s", o.String())
	}
	t.Logf("%s", log)
}
