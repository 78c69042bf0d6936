package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/postgres"
)

// Short timing keeps the suite quick: renewals every ttl/3 ≈ 667ms.
const (
	ttl         = 2 * time.Second
	grace       = time.Second
	stopTimeout = time.Second
)

func TestOneOfThreeReplicasRunsTheCommandAndAPeerTakesOverAfterAKill9OnSQLite(t *testing.T) {
	dir := t.TempDir()
	testFailover(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir, false)
}

func TestOneOfThreeReplicasRunsTheCommandAndAPeerTakesOverAfterAKill9OnPostgres(t *testing.T) {
	testFailover(t, postgresTable(t, "cli_test"), t.TempDir(), true)
}

// testFailover runs three tenure processes on one key and checks, from the
// commands' own start/stop log and the store's lease table, that exactly
// one command runs; that after kill -9 of the holder its command is gone at
// once and a peer starts no sooner than grace after the dead holder's last
// renewal and no later than TTL + grace + 1s after the kill; and that
// SIGTERM to the next holder hands over at once.
func testFailover(t *testing.T, url, dir string, pushed bool) {
	log := filepath.Join(dir, "commands.log")
	ctx := t.Context()
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	procs := map[string]*proc{}
	for i := 1; i <= 3; i++ {
		owner := fmt.Sprintf("replica-%d", i)
		procs[owner] = start(t, childEnv("record", log), "run", "--key", "job", "--store", url, "--owner", owner,
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(),
			"--", self(t))
	}
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	time.Sleep(ttl) // several renewal rounds: nobody else may start meanwhile
	if evs := readChildLog(t, log); len(evs) != 1 {
		t.Fatalf("want exactly one command running, log: %+v", evs)
	}
	if l := lease(t, st, "job"); !l.Live || tenure.OwnerName(l.Owner) != first.owner || l.Epoch != first.epoch || !l.Running {
		t.Fatalf("lease %+v does not match the running command %+v", l, first)
	}

	// kill -9 the holder: its guard must kill the command and grandchild.
	holder := procs[first.owner]
	killAt := time.Now()
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	dead := lease(t, st, "job") // no renewal can follow the kill
	expiry := before.Add(dead.TimeLeft)
	goneAt := waitGone(t, time.Second, first.pid, first.grand)
	t.Logf("holder killed; its command was gone %v later; lease expires %v after the kill", goneAt.Sub(killAt), expiry.Sub(killAt))

	evs := waitStarts(t, log, 2, ttl+grace+3*time.Second)
	second := evs[len(evs)-1]
	if second.owner == first.owner {
		t.Fatalf("the killed replica started again: %+v", second)
	}
	if earliest := expiry.Add(grace); second.at.Before(earliest) {
		t.Errorf("peer started %v before expiry + grace", earliest.Sub(second.at))
	}
	if latest := killAt.Add(ttl + grace + time.Second); second.at.After(latest) {
		t.Errorf("peer started %v after the kill, later than TTL + grace + 1s", second.at.Sub(killAt))
	}
	t.Logf("peer took over %v after the kill (%v after expiry)", second.at.Sub(killAt), second.at.Sub(expiry))

	// SIGTERM to the new holder: it stops its command, releases, and the
	// third replica takes over without waiting for expiry or grace.
	next := procs[second.owner]
	if err := next.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := next.wait(t, stopTimeout+5*time.Second); code != 0 {
		t.Errorf("tenure exited %d after SIGTERM, want 0", code)
	}
	evs = waitStarts(t, log, 3, ttl+grace+3*time.Second)
	third := evs[len(evs)-1]
	var stopped childEvent
	for _, ev := range evs {
		if ev.what == "stop" && ev.pid == second.pid {
			stopped = ev
		}
	}
	if stopped.what == "" {
		t.Fatalf("the command got no SIGTERM (no stop line): %+v", evs)
	}
	handoff := third.at.Sub(stopped.at)
	// Without the release, the peer could start no sooner than expiry +
	// grace: at least ttl - ttl/3 + grace ≈ 2.3s after the stop. With a
	// push channel (LISTEN/NOTIFY) it hears of the release at once; over a
	// shared SQLite file it finds it at its next poll (every ttl/3). The
	// rest is starting processes on a busy two-core machine.
	limit := ttl/3 + 800*time.Millisecond
	if pushed {
		limit = time.Second
	}
	if handoff > limit {
		t.Errorf("graceful handoff took %v, want under %v (no waiting for expiry + grace)", handoff, limit)
	}
	t.Logf("graceful handoff took %v", handoff)
	waitGone(t, time.Second, second.pid, second.grand)
	checkNoOverlap(t, readChildLog(t, log), map[int]time.Time{first.pid: goneAt})
}

func lease(t *testing.T, st store.Store, key string) store.Lease {
	t.Helper()
	leases, err := st.List(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no lease for %q", key)
	return store.Lease{}
}

// checkNoOverlap checks that no two commands ran at once. A command with
// no stop line ended at killed[pid] (when it was seen gone) or still runs.
func checkNoOverlap(t *testing.T, evs []childEvent, killed map[int]time.Time) {
	t.Helper()
	type span struct {
		pid        int
		start, end time.Time
	}
	var spans []span
	for _, ev := range evs {
		if ev.what != "start" {
			continue
		}
		s := span{pid: ev.pid, start: ev.at, end: time.Now().Add(time.Hour)}
		if at, ok := killed[ev.pid]; ok {
			s.end = at
		}
		for _, e := range evs {
			if e.what == "stop" && e.pid == ev.pid {
				s.end = e.at
			}
		}
		spans = append(spans, s)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) {
			t.Errorf("commands overlap: pid %d started %v before pid %d ended", spans[i].pid, spans[i-1].end.Sub(spans[i].start), spans[i-1].pid)
		}
	}
}

func TestCommandIgnoringSigtermIsKilledAfterTheStopTimeoutWithItsGrandchildren(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "commands.log")
	url := "sqlite:" + filepath.Join(dir, "leases.db")
	p := start(t, childEnv("stubborn", log), "run", "--key", "stubborn", "--store", url,
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	ev := waitStarts(t, log, 1, 10*time.Second)[0]
	termAt := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Both ignore SIGTERM: they must still be alive just before the stop
	// timeout, and gone soon after it.
	time.Sleep(stopTimeout - 200*time.Millisecond)
	if !testenv.Alive(ev.pid) || !testenv.Alive(ev.grand) {
		t.Fatalf("the command or its grandchild died before the stop timeout")
	}
	gone := waitGone(t, stopTimeout+time.Second, ev.pid, ev.grand)
	if took := gone.Sub(termAt); took < stopTimeout {
		t.Errorf("killed after %v, before the %v stop timeout", took, stopTimeout)
	}
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Errorf("tenure exited %d, want 0 (the command died, the lease was released)", code)
	}
	st, err := storeurl.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if l := lease(t, st, "stubborn"); !l.Released {
		t.Errorf("lease %+v not released after the command was killed", l)
	}
}

func TestOnceExitsWithTheCommandsStatusAndReleases(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "leases.db")
	_, stderr, code := runTenure(t, childEnv("exit:7", filepath.Join(dir, "log")),
		"run", "--once", "--key", "once", "--store", url, "--ttl", ttl.String(), "--grace", grace.String(),
		"--stop-timeout", stopTimeout.String(), "--", self(t))
	if code != 7 {
		t.Fatalf("exit code %d, want the command's 7; stderr:\n%s", code, stderr)
	}
	st, err := storeurl.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if l := lease(t, st, "once"); !l.Released {
		t.Errorf("lease %+v not released after --once", l)
	}
	_, _, code = runTenure(t, childEnv("exit:0", filepath.Join(dir, "log")),
		"run", "--once", "--key", "once", "--store", url, "--stop-timeout", "1s", "--", self(t))
	if code != 0 {
		t.Errorf("exit code %d for a command that exited 0", code)
	}
	// The command's own 2 passes through; Tenure's own failures under
	// --once are 125, never a code the command might have returned.
	_, _, code = runTenure(t, childEnv("exit:2", filepath.Join(dir, "log")),
		"run", "--once", "--key", "once", "--store", url, "--stop-timeout", "1s", "--", self(t))
	if code != 2 {
		t.Errorf("exit code %d for a command that exited 2, want 2", code)
	}
	for _, store := range []string{
		"mongodb://x", // a usage error: 2 without --once
		"postgres://postgres@" + testenv.ClosedAddr(t) + "/test", // no store there: 3 without --once
	} {
		_, stderr, code := runTenure(t, childEnv("exit:0", filepath.Join(dir, "log")),
			"run", "--once", "--key", "once", "--store", store, "--", self(t))
		if code != 125 {
			t.Errorf("--store %s: exit %d (%s), want 125", store, code, strings.TrimSpace(stderr))
		}
	}
}

func TestExitedCommandIsRestartedUnderTheSameLease(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "commands.log")
	url := "sqlite:" + filepath.Join(dir, "leases.db")
	// A recorder that is killed by hand: tenure must start it again, in
	// the same term, after its backoff (ttl/3).
	p := start(t, childEnv("record", log), "run", "--key", "restart", "--store", url,
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	first := waitStarts(t, log, 1, 10*time.Second)[0]
	if err := syscall.Kill(first.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs := waitStarts(t, log, 2, 5*time.Second)
	again := evs[len(evs)-1]
	if again.epoch != first.epoch || again.owner != first.owner {
		t.Errorf("restarted as %+v, want the same owner and epoch as %+v", again, first)
	}
	waitGone(t, time.Second, first.grand) // the first run's leftovers were killed
	_ = p
}

// dropTable removes a test's lease table from PostgreSQL.
// postgresTable is the test PostgreSQL server's URL with a lease table of
// its own, named prefix_N and dropped when the test ends.
func postgresTable(t *testing.T, prefix string) string {
	t.Helper()
	base := testenv.Postgres.URL(t)
	table := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	t.Cleanup(func() { dropTable(t, base, table) })
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "table=" + table
}

func dropTable(t *testing.T, url, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, url, postgres.Options{Table: table})
	if err != nil {
		t.Logf("drop %s: %v", table, err)
		return
	}
	defer s.Close()
	if err := s.Drop(ctx); err != nil { // with its session table
		t.Logf("drop %s: %v", table, err)
	}
}

func TestOnceInterruptedBySigtermExitsWith143(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "commands.log")
	p := start(t, childEnv("record", log), "run", "--once", "--key", "once-term", "--store", "sqlite:"+filepath.Join(dir, "leases.db"),
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	waitStarts(t, log, 1, 10*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d: the command did not finish", code, 128+int(syscall.SIGTERM))
	}
}

func TestSecondSignalKillsAStubbornCommandAtOnce(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "commands.log")
	const longStop = 1500 * time.Millisecond
	p := start(t, childEnv("stubborn", log), "run", "--key", "impatient", "--store", "sqlite:"+filepath.Join(dir, "leases.db"),
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", longStop.String(), "--", self(t))
	ev := waitStarts(t, log, 1, 10*time.Second)[0]
	first := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a repeat within a second would be ignored
	if !testenv.Alive(ev.pid) {
		t.Fatal("the stubborn command died on SIGTERM")
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if gone := waitGone(t, longStop, ev.pid, ev.grand); gone.Sub(first) >= longStop {
		t.Errorf("the command lived %v after the first signal, the whole stop timeout", gone.Sub(first))
	}
	p.wait(t, 5*time.Second)
}
