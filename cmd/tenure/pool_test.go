package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// Pool timing: renewals every 2s, store calls bounded at 1s. A 3s TTL
// (calls bounded at 500ms) made SQLite renewals time out when three worker
// processes and the rest of the test suite shared two cores, and the
// workers stepped down for want of a confirmed renewal. The engine waits
// one round after joining before it claims, claims keys it does not
// prefer 1.5 rounds after they are free, and counts a crashed holder's
// keys as owned until their expiry + grace.
const (
	poolTTL   = 6 * time.Second
	poolGrace = 2 * time.Second
	poolKeys  = 40
)

// poolScript is the command each key runs, as bash -c poolScript bash
// {key}: it logs start, grand (its sleeping grandchild) and, on SIGTERM,
// stop, in the format of the test binary's own log. Only builtins log, so
// a line never waits for a fork on a busy machine, and a group SIGTERM
// cannot kill a helper halfway through one. A {key} that does not match
// TENURE_KEY shows up as a key the pool does not have.
const poolScript = `trap 'log stop 0; exit 0' TERM
k=$1
[ "$k" = "$TENURE_KEY" ] || k="mismatch:$k:$TENURE_KEY"
log() { echo "$1 $TENURE_OWNER $TENURE_EPOCH $$ $2 ${EPOCHREALTIME/./}000 $k" >> "$TENURE_TEST_LOG"; }
log start 0
sleep 1000 &
log grand $!
wait`

// poolRun is a pool of tenure processes sharing a store and a child log.
type poolRun struct {
	t       *testing.T
	url     string
	log     string
	keys    []string // the pool's keys now
	known   []string // every key the pool ever had
	source  []string // --keys-file F, or another key source
	workers map[string]*proc
	killed  map[int]time.Time // pid → when it was seen gone
}

func newPoolRun(t *testing.T, url, dir string, n int) *poolRun {
	if out, err := exec.Command("bash", "-c", `echo "$EPOCHREALTIME"`).Output(); err != nil || len(out) < 10 {
		t.Skipf("the pool tests' command needs bash 5 (EPOCHREALTIME): %q, %v", out, err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("acct-%02d", i)
	}
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte("# accounts\n"+strings.Join(keys, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &poolRun{t: t, url: url, log: filepath.Join(dir, "commands.log"), keys: keys, known: keys,
		source: []string{"--keys-file", file}, workers: map[string]*proc{}, killed: map[int]time.Time{}}
}

// start starts worker owner with extra flags.
func (p *poolRun) start(owner string, extra ...string) *proc {
	args := append([]string{"pool", "--name", "accts", "--store", p.url, "--owner", owner,
		"--ttl", poolTTL.String(), "--grace", poolGrace.String(), "--stop-timeout", stopTimeout.String()}, p.source...)
	args = append(append(args, extra...), "--", "bash", "-c", poolScript, "bash", "{key}")
	w := start(p.t, []string{childLogEnv + "=" + p.log}, args...)
	p.workers[owner] = w
	return w
}

// running maps each key to the commands started for it that have neither
// logged their stop nor been killed; it fails the test at once if a key
// has two, or a key not in the pool runs.
func (p *poolRun) running() map[string][]childEvent {
	p.t.Helper()
	out := map[string][]childEvent{}
	evs := readChildLog(p.t, p.log)
	for _, ev := range evs {
		if ev.what != "start" {
			continue
		}
		if _, gone := p.killed[ev.pid]; gone || slices.ContainsFunc(evs, func(e childEvent) bool { return e.what == "stop" && e.pid == ev.pid }) {
			continue
		}
		if !slices.Contains(p.known, ev.key) {
			p.t.Fatalf("a command runs for %q, not a key of the pool", ev.key)
		}
		out[ev.key] = append(out[ev.key], ev)
		if len(out[ev.key]) > 1 {
			p.t.Fatalf("two commands run for %s at once: %+v", ev.key, out[ev.key])
		}
	}
	return out
}

// waitAllOnce waits until every key runs exactly once (with its grandchild
// started) and cond holds, and returns what runs.
func (p *poolRun) waitAllOnce(within time.Duration, what string, cond func(map[string][]childEvent) bool) map[string][]childEvent {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		run := p.running()
		ready := len(run) == len(p.keys)
		for _, key := range p.keys {
			ready = ready && len(run[key]) == 1 && run[key][0].grand != 0
		}
		if ready && (cond == nil || cond(run)) {
			return run
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: not so %v later; %d of %d keys run, by owner %v", what, within, len(run), len(p.keys), byOwner(run))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// byOwner counts the running keys of each owner.
func byOwner(run map[string][]childEvent) map[string]int {
	out := map[string]int{}
	for _, evs := range run {
		out[evs[0].owner]++
	}
	return out
}

// keysOf returns the commands owner runs.
func keysOf(run map[string][]childEvent, owner string) []childEvent {
	var out []childEvent
	for _, evs := range run {
		if evs[0].owner == owner {
			out = append(out, evs[0])
		}
	}
	return out
}

// checkNoKeyOverlaps checks, key by key, that no two commands ran at once.
func (p *poolRun) checkNoKeyOverlaps() {
	p.t.Helper()
	perKey := map[string][]childEvent{}
	for _, ev := range readChildLog(p.t, p.log) {
		perKey[ev.key] = append(perKey[ev.key], ev)
	}
	for _, evs := range perKey {
		checkNoOverlap(p.t, evs, p.killed)
	}
}

func TestPoolRunsEveryKeyOnceAcrossJoinCrashAndDrainOnSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testPool(t, newPoolRun(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir, poolKeys))
}

func TestPoolRunsEveryKeyOnceAcrossJoinCrashAndDrainOnPostgres(t *testing.T) {
	t.Parallel()
	testPool(t, newPoolRun(t, postgresTable(t, "cli_pool"), t.TempDir(), poolKeys))
}

// testPool starts three workers and checks that every key runs exactly
// once; that a fourth joining gets keys; that after kill -9 of one, each
// of its keys runs elsewhere no sooner than its lease's expiry + grace and
// within TTL + grace + 4s; that SIGTERM to another hands its keys over
// without waiting for expiry; and that no key ever ran twice at once.
func testPool(t *testing.T, p *poolRun) {
	st, err := storeurl.Open(t.Context(), p.url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	began := time.Now()
	p.start("w1")
	p.start("w2")
	addr := httpAddr(t, p.start("w3", "--http", "127.0.0.1:0"))
	run := p.waitAllOnce(20*time.Second, "three workers share the keys", func(run map[string][]childEvent) bool {
		return len(byOwner(run)) == 3
	})
	t.Logf("%d keys running on three workers %v after start: %v", len(p.keys), time.Since(began).Round(time.Millisecond), byOwner(run))
	checkWorkersTable(t, p.url, byOwner(run))
	checkPoolsStatus(t, addr, len(p.keys), byOwner(run))

	joined := time.Now()
	p.start("w4")
	run = p.waitAllOnce(15*time.Second, "a fourth worker gets keys", func(run map[string][]childEvent) bool {
		return byOwner(run)["w4"] > 0
	})
	t.Logf("the fourth worker runs %d keys %v after it started: %v", byOwner(run)["w4"], time.Since(joined).Round(time.Millisecond), byOwner(run))

	// kill -9: the guards kill its commands at once; each key runs again
	// elsewhere after its lease's expiry + grace, and not much later.
	victim := keysOf(run, "w1")
	if len(victim) == 0 {
		t.Fatalf("w1 runs no key to take over: %v", byOwner(run))
	}
	killAt := time.Now()
	if err := p.workers["w1"].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	expiry := leaseExpiries(t, st, "w1") // no renewal can follow the kill
	var pids []int
	for _, ev := range victim {
		pids = append(pids, ev.pid, ev.grand)
	}
	goneAt := waitGone(t, 2*time.Second, pids...)
	for _, ev := range victim {
		p.killed[ev.pid] = goneAt
	}
	t.Logf("w1 killed with %d keys; its commands were all gone %v later", len(victim), goneAt.Sub(killAt).Round(time.Millisecond))
	run = p.waitAllOnce(poolTTL+poolGrace+5*time.Second, "w1's keys run elsewhere", nil)
	var slowest time.Duration
	for _, ev := range victim {
		next := run[ev.key][0]
		if next.owner == "w1" {
			t.Errorf("%s started again on the killed worker", ev.key)
		}
		if exp, ok := expiry[ev.key]; !ok {
			t.Errorf("%s: the store showed no live lease of w1 right after the kill", ev.key)
		} else if earliest := exp.Add(poolGrace); next.at.Before(earliest) {
			t.Errorf("%s started on %s %v before its lease's expiry + grace", ev.key, next.owner, earliest.Sub(next.at))
		}
		slowest = max(slowest, next.at.Sub(killAt))
	}
	if limit := poolTTL + poolGrace + 4*time.Second; slowest > limit {
		t.Errorf("the last of w1's keys started %v after the kill, later than TTL + grace + 4s", slowest)
	}
	t.Logf("every key of w1 ran again within %v of the kill: %v", slowest.Round(time.Millisecond), byOwner(run))

	// SIGTERM drains: w2 stops its commands, releases, exits 0, and each of
	// its keys runs elsewhere before its lease's expiry + grace, when a
	// peer could have taken it had w2 crashed.
	drained := keysOf(run, "w2")
	expiry = leaseExpiries(t, st, "w2")
	termAt := time.Now()
	if err := p.workers["w2"].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.workers["w2"].wait(t, 10*time.Second); code != 0 {
		t.Errorf("w2 exited %d after SIGTERM, want 0", code)
	}
	run = p.waitAllOnce(poolTTL+poolGrace, "w2's keys run elsewhere", func(run map[string][]childEvent) bool {
		return byOwner(run)["w2"] == 0
	})
	slowest = 0
	for _, ev := range drained {
		next := run[ev.key][0]
		if !slices.ContainsFunc(readChildLog(t, p.log), func(e childEvent) bool { return e.what == "stop" && e.pid == ev.pid }) {
			t.Errorf("%s: w2's command got no SIGTERM (no stop line)", ev.key)
		}
		if latest := expiry[ev.key].Add(poolGrace); !next.at.Before(latest) {
			t.Errorf("%s ran on %s only %v after its drained lease's expiry + grace: no faster than a crash", ev.key, next.owner, next.at.Sub(latest))
		}
		slowest = max(slowest, next.at.Sub(termAt))
	}
	t.Logf("w2 drained: its %d keys all ran elsewhere within %v of the SIGTERM: %v", len(drained), slowest.Round(time.Millisecond), byOwner(run))

	for _, owner := range []string{"w3", "w4"} {
		if err := p.workers[owner].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, owner := range []string{"w3", "w4"} {
		if code := p.workers[owner].wait(t, 10*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", owner, code)
		}
	}
	if left := p.running(); len(left) != 0 {
		t.Errorf("commands left running after every worker stopped: %v", byOwner(left))
	}
	p.checkNoKeyOverlaps()
	t.Logf("whole scenario: %v", time.Since(began).Round(time.Millisecond))
}

// leaseExpiries estimates when owner's live leases expire: a lower bound,
// since the clock is read before the list.
func leaseExpiries(t *testing.T, st store.Store, owner string) map[string]time.Time {
	t.Helper()
	before := time.Now()
	leases, err := st.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, l := range leases {
		if k, ok := strings.CutPrefix(l.Key, tenure.PoolPrefix+"accts/"); ok && l.Live && tenure.OwnerName(l.Owner) == owner {
			out[k] = before.Add(l.TimeLeft)
		}
	}
	return out
}

var workerRow = regexp.MustCompile(`(?m)^accts\s+(\S+)\s+1\s+-\s+(\S+)\s+(\S+)\s`)

// checkWorkersTable checks the WORKERS part of tenure status against the
// keys the commands' log shows running.
func checkWorkersTable(t *testing.T, url string, want map[string]int) {
	t.Helper()
	stdout, stderr, code := runTenure(t, nil, "status", "--store", url)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	got := map[string]int{}
	for _, m := range workerRow.FindAllStringSubmatch(stdout, -1) {
		n, err := strconv.Atoi(m[3])
		if m[2] != "active" || err != nil {
			t.Errorf("worker %s shown %s with %s keys:\n%s", m[1], m[2], m[3], stdout)
		}
		got[tenure.OwnerName(m[1])] = n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("status shows workers %v, the commands running say %v:\n%s", got, want, stdout)
	}
	var rows []map[string]any
	stdout, _, _ = runTenure(t, nil, "status", "--store", url, "--json")
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	members := 0
	for _, r := range rows {
		if len(r) != 7 {
			t.Errorf("status --json row %v does not have the 7 documented fields", r)
		}
		if strings.HasPrefix(r["key"].(string), "~workers/accts/") {
			members++
		}
	}
	if len(rows) != len(want)+sum(want) || members != len(want) {
		t.Errorf("status --json has %d rows, %d of them memberships; want %d keys and %d memberships", len(rows), members, sum(want), len(want))
	}
}

// checkPoolsStatus checks the pools section of a worker's /status; the
// worker's view may lag its peers by a round.
func checkPoolsStatus(t *testing.T, addr string, keys int, want map[string]int) {
	t.Helper()
	var doc struct {
		Pools []struct {
			Name    string         `json:"name"`
			Keys    int            `json:"keys"`
			Held    int            `json:"held"`
			Workers map[string]int `json:"workers"`
		} `json:"pools"`
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		body := get(t, "http://"+addr+"/status")
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		ok := len(doc.Pools) == 1 && doc.Pools[0].Name == "accts" && doc.Pools[0].Keys == keys &&
			fmt.Sprint(byName(doc.Pools[0].Workers)) == fmt.Sprint(want) && doc.Pools[0].Held == want["w3"]
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("/status pools = %+v, want accts with %d keys, workers %v", doc.Pools, keys, want)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// byName keys a count per owner id by the owners' --owner names.
func byName(perID map[string]int) map[string]int {
	out := make(map[string]int, len(perID))
	for id, n := range perID {
		out[tenure.OwnerName(id)] += n
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestPoolOnRedisRunsEveryKeyOnceAndHandsOverOnSigterm(t *testing.T) {
	t.Parallel()
	base := testenv.Redis.URL(t)
	ns := "cli_pool_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	t.Cleanup(func() { deleteNamespace(t, base, ns) })
	p := newPoolRun(t, base+"?namespace="+ns, t.TempDir(), 8)
	// The keys come from a command this time; each worker runs it itself.
	p.source = []string{"--keys-cmd", "for i in 0 1 2 3 4 5 6 7; do echo acct-0$i; done"}
	p.start("r1")
	p.start("r2")
	run := p.waitAllOnce(15*time.Second, "two workers share the keys", func(run map[string][]childEvent) bool {
		return len(byOwner(run)) == 2
	})
	drained := keysOf(run, "r1")
	if err := p.workers["r1"].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.workers["r1"].wait(t, 10*time.Second); code != 0 {
		t.Errorf("r1 exited %d after SIGTERM, want 0", code)
	}
	run = p.waitAllOnce(poolTTL+poolGrace, "r1's keys run on r2", func(run map[string][]childEvent) bool {
		return byOwner(run)["r2"] == len(p.keys)
	})
	t.Logf("r1 handed %d keys over: %v", len(drained), byOwner(run))
	if err := p.workers["r2"].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.workers["r2"].wait(t, 10*time.Second)
	p.checkNoKeyOverlaps()
}

func TestPoolReadsItsKeyFileAgainOnSighup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := newPoolRun(t, "sqlite:"+filepath.Join(dir, "leases.db"), dir, 3)
	w := p.start("solo", "--refresh", "1h")
	p.waitAllOnce(10*time.Second, "one worker runs the three keys", nil)
	// Drop acct-00, add acct-03: nothing changes until the SIGHUP.
	keysFile := p.source[1]
	if err := os.WriteFile(keysFile, []byte("acct-01\nacct-02\nacct-03\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	removed := p.running()["acct-00"][0]
	p.keys = []string{"acct-01", "acct-02", "acct-03"}
	p.known = append(p.known, "acct-03")
	if err := w.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitAllOnce(5*time.Second, "the new key set runs after SIGHUP", nil)
	if !slices.ContainsFunc(readChildLog(t, p.log), func(e childEvent) bool { return e.what == "stop" && e.pid == removed.pid }) {
		t.Error("the command of the key that left the file was not stopped")
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	p.checkNoKeyOverlaps()
}
