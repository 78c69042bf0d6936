package chaos

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// The store tests run a short schedule (TENURE_CHAOS_DURATION, default
// 30s) of every fault kind, with 8 keys in a pool besides the singletons
// as tenure verify has by default, and expect no violation. A long run of
// one store:
//
//	TENURE_CHAOS_DURATION=10m go test ./internal/harness/chaos -run TestChaosPostgres -v -timeout 30m
//
// TENURE_CHAOS_SEED replays a schedule; TENURE_CHAOS_KEYS, TENURE_CHAOS_POOL_KEYS,
// TENURE_CHAOS_REPLICAS and TENURE_CHAOS_CONCURRENCY change the shape;
// TENURE_CHAOS_FAULTS=log-stall,slow-store picks fault kinds;
// TENURE_CHAOS_HISTORY=DIR keeps every run's history (otherwise only a
// failed run's is kept).

// TestChaosSQLite runs two faults at a time (the other stores one at a
// time, which measures each takeover on its own).
func TestChaosSQLite(t *testing.T) {
	runChaosWith(t, "sqlite:"+filepath.Join(t.TempDir(), "leases.db"), 30*time.Second,
		func(o *Options) { o.Concurrency, o.PoolKeys = 2, 8 })
}

func TestChaosPostgres(t *testing.T) {
	runChaos(t, testenv.Postgres.URL(t))
}

func TestChaosRedis(t *testing.T) {
	runChaos(t, testenv.Redis.URL(t))
}

func TestChaosMySQL(t *testing.T) {
	runChaos(t, testenv.MySQL.URL(t))
}

func TestChaosEtcd(t *testing.T) {
	runChaos(t, testenv.Etcd.URL(t))
}

// TestChaosPool shares keys in a pool besides the singletons, under
// faults that move a pool's keys: a replica killed or frozen, and one
// restarted unable to read the pool's keys (source-down), which must take
// no share of them (when it took one, its peers stopped claiming at their
// lowered caps and keys ran nowhere while its source failed). Each step
// runs alone, and waits for the keys to settle: three kinds fit the run,
// source-down among them.
func TestChaosPool(t *testing.T) {
	rep := runChaosWith(t, "sqlite:"+filepath.Join(t.TempDir(), "leases.db"), 30*time.Second, func(o *Options) {
		o.PoolKeys = 12
		o.Faults = []string{FaultSourceDown, FaultKill, FaultPause}
	})
	wantPoolFault(t, rep, FaultSourceDown)
}

// TestChaosPoolUneven is TestChaosPool's pool under the faults that must
// cost it nothing: a replica restarted to take at most one key (low-max)
// among peers without a limit, whose peers must take the rest; one whose
// log stalls, which must go on taking and running its share; and a
// graceful restart.
func TestChaosPoolUneven(t *testing.T) {
	rep := runChaosWith(t, "sqlite:"+filepath.Join(t.TempDir(), "leases.db"), 30*time.Second, func(o *Options) {
		o.PoolKeys = 12
		o.Faults = []string{FaultLowMax, FaultLogStall, FaultRestart}
	})
	wantPoolFault(t, rep, FaultLowMax)
}

// wantPoolFault fails the test unless the run drew fault and checked the
// pool over some of it.
func wantPoolFault(t *testing.T, rep *Report, fault string) {
	t.Helper()
	if rep != nil && (rep.Faults[fault] == 0 || rep.PoolChecked == 0) {
		t.Errorf("no %s fault ran (%v), or the pool check applied to none of the run (%v)", fault, rep.Faults, rep.PoolChecked)
	}
}

func runChaos(t *testing.T, url string) {
	_ = runChaosWith(t, url, 30*time.Second, func(o *Options) { o.PoolKeys = 8 })
}

// runChaosWith runs a schedule of d (unless TENURE_CHAOS_DURATION says
// otherwise) on url and expects no violation; adjust changes the options.
func runChaosWith(t *testing.T, url string, d time.Duration, adjust func(*Options)) *Report {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	opts := Options{Store: url, Duration: d,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if adjust != nil {
		adjust(&opts)
	}
	if v := os.Getenv("TENURE_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TENURE_CHAOS_DURATION: %v", err)
		}
		opts.Duration = d
	}
	if v := os.Getenv("TENURE_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_CHAOS_SEED: %v", err)
		}
		opts.Seed = seed
	}
	for env, field := range map[string]*int{"TENURE_CHAOS_KEYS": &opts.Keys, "TENURE_CHAOS_REPLICAS": &opts.Replicas,
		"TENURE_CHAOS_CONCURRENCY": &opts.Concurrency, "TENURE_CHAOS_POOL_KEYS": &opts.PoolKeys} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %v", env, err)
			}
			*field = n
		}
	}
	if v := os.Getenv("TENURE_CHAOS_FAULTS"); v != "" {
		opts.Faults = strings.Split(v, ",")
	}
	opts.HistoryDir = keptHistoryDir(t, false)
	start := time.Now()
	rep, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var text strings.Builder
	_ = rep.WriteText(&text)
	t.Logf("after %v:\n%s", time.Since(start).Round(time.Second), text.String())
	if !rep.OK() {
		t.Errorf("%d violations; the history is in %s (replay with TENURE_CHAOS_SEED=%d)",
			len(rep.Violations), rep.HistoryDir, rep.Seed)
	}
	// A run that injected nothing or moved nothing proves nothing. A key
	// moves when another replica takes it or when its holder has to take
	// it again under a new epoch (a store restart can end every term while
	// the holder, which needs no grace to retake its own key, wins again).
	faults := 0
	for _, n := range rep.Faults {
		faults += n
	}
	moved := rep.Transitions > 0 || rep.Terms > rep.Keys
	if faults == 0 || !moved || rep.Ops.Accepted == 0 {
		t.Errorf("the run was vacuous: %d faults, %d transitions, %d terms over %d keys, %d accepted writes",
			faults, rep.Transitions, rep.Terms, rep.Keys, rep.Ops.Accepted)
	}
	return rep
}

func TestAReplicaThatCannotStartEndsTheRunWithWhatItPrinted(t *testing.T) {
	start := time.Now()
	_, err := Run(context.Background(), Options{
		Store:      "sqlite:" + filepath.Join(t.TempDir(), "leases.db"),
		Duration:   time.Second,
		HistoryDir: t.TempDir(), // a run that cannot start keeps its history
		Executable: "/bin/sh",
		// Not a replica: prints and exits, as a binary without ReplicaMain would.
		ReplicaArgs: []string{"-c", "echo this binary is no replica >&2; exit 3"},
	})
	if err == nil || !strings.Contains(err.Error(), "this binary is no replica") {
		t.Fatalf("Run: %v; want the replica's own output", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v to notice", took)
	}
}

// A history directory with an earlier run's files in it would merge two
// runs' logs into one history (the logs are appended to): the run refuses
// it, naming the directory, before it starts anything.
func TestARunRefusesAHistoryDirectoryAnotherRunFilled(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "r1.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Options{
		Store:      "sqlite:" + filepath.Join(t.TempDir(), "leases.db"),
		Duration:   time.Second,
		HistoryDir: dir,
		Executable: "/bin/false", // would end the run with another error
	})
	if err == nil || !strings.Contains(err.Error(), dir+" is not empty (it holds r1.jsonl)") {
		t.Fatalf("Run: %v; want it to refuse the directory", err)
	}
}

// TestARunCatchesARunnerThatOutlivesItsLease proves the whole pipeline can
// fail: runners that go on working 4s after their context ends overlap
// their successors (or cut the fail-closed margin) once a partition takes
// their leases, and the run says so and keeps its history.
func TestARunCatchesARunnerThatOutlivesItsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for seconds")
	}
	rep, err := Run(context.Background(), Options{
		Store: "sqlite:" + filepath.Join(t.TempDir(), "leases.db"),
		// Long enough for a partition to find a holder after a slow start
		// (on a loaded -race machine, 6 of 16 key-seconds once went by
		// before the first holders, and the one partition found none).
		Duration: 16 * time.Second,
		Keys:     2,
		Faults:   []string{FaultPartition},
		lateStop: 4 * time.Second,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.HistoryDir != "" {
		removeHistoryIfPassed(t, rep.HistoryDir)
	}
	// A late runner shows as an overlap when a peer took its key, or as a
	// short fail-closed margin when its successor came sooner than the
	// promised margin after it should have stopped (the same replica may
	// win the key back, and one process never runs a key twice); which
	// one depends on who wins the key after the partition.
	if rep.OK() || len(violations(rep, InvOverlap))+len(violations(rep, InvMargin)) == 0 {
		t.Fatalf("the late runners went unnoticed:\n%s", text(rep))
	}
	t.Logf("as expected:\n%s", text(rep))
	if rep.HistoryDir == "" {
		t.Fatal("a failed run did not keep its history")
	}
	if _, err := os.Stat(filepath.Join(rep.HistoryDir, "timeline.svg")); err != nil {
		t.Errorf("no timeline in the kept history: %v", err)
	}
	again, err := LoadHistory(rep.HistoryDir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Check(again).Violations); n != len(rep.Violations) {
		t.Errorf("checking the kept history again found %d violations, the run %d", n, len(rep.Violations))
	}
}

// TestSameOwnerNamesPassWhenTheStoreSeesAnIDPerProcess runs same-owner
// faults, and kills aimed at key holders, on replicas whose owner ids are
// their configured names plus a suffix of their own, as an engine that
// makes owner ids unique per process start gives them: two processes
// with one name are then two owners, nothing overlaps, and the harness
// still finds every holder (it reads each replica's id from the replica,
// never from the name it configured).
func TestSameOwnerNamesPassWhenTheStoreSeesAnIDPerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for seconds")
	}
	// Kept whatever Run thinks of it: a run without violations may still
	// fail this test by measuring no takeover, and its history tells why.
	history := keptHistoryDir(t, true)
	removeHistoryIfPassed(t, history)
	rep, err := Run(context.Background(), Options{
		Store: "sqlite:" + filepath.Join(t.TempDir(), "leases.db"),
		// Long enough that a kill is followed by a takeover within the run
		// (a kill 8s into a 10s run left none to measure, once in CI).
		Duration:   20 * time.Second,
		Keys:       2,
		Faults:     []string{FaultSameOwner, FaultKill},
		uniqueIDs:  true,
		HistoryDir: history,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("violations:\n%s", text(rep))
	}
	// The replicas outlive the last fault by the takeover bound, so that a
	// kill late in the run still has its takeover measured.
	var lastFault, runEnd int64
	for _, e := range rep.History.Events {
		switch e.Ev {
		case evFaultEnd:
			lastFault = max(lastFault, e.T)
		case evRunEnd:
			runEnd = e.T
		}
	}
	if tail, bound := time.Duration(runEnd-lastFault), rep.Takeover.Bound; lastFault == 0 || tail < bound {
		t.Errorf("the run ended %v after its last fault; want the takeover bound, %v", tail, bound)
	}
	if rep.SameOwners == 0 || rep.SharedIDs != 0 || rep.Takeover.N == 0 {
		t.Fatalf("same-owner faults %d (shared ids %d), takeovers after a kill %d; want some, none, some:\n%s",
			rep.SameOwners, rep.SharedIDs, rep.Takeover.N, text(rep))
	}
	t.Logf("as expected:\n%s", text(rep))
}
