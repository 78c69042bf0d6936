package main_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// seed puts leases into a fresh SQLite store: one held, one released, one
// expired.
func seed(t *testing.T) string {
	t.Helper()
	url := "sqlite:" + filepath.Join(t.TempDir(), "leases.db")
	st, err := storeurl.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	for _, c := range []struct {
		key string
		ttl time.Duration
	}{{"held", time.Hour}, {"released", time.Hour}, {"expired", time.Millisecond}} {
		res, err := st.Acquire(ctx, store.AcquireRequest{Key: c.key, Owner: "owner-" + c.key, TTL: c.ttl, Grace: time.Second, Running: true})
		if err != nil || !res.Acquired {
			t.Fatalf("seed %s: %+v, %v", c.key, res, err)
		}
		if c.key == "released" {
			if err := st.Release(ctx, "owner-released", []store.Term{{Key: c.key, Epoch: res.Epoch}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(5 * time.Millisecond) // let "expired" expire
	return url
}

func TestStatusJSONHasExactlyTheDocumentedFields(t *testing.T) {
	t.Parallel()
	url := seed(t)
	stdout, stderr, code := runTenure(t, nil, "status", "--store", url, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("status --json printed %q: %v", stdout, err)
	}
	want := []string{"epoch", "expires_in_ms", "key", "live", "owner", "released", "running"}
	byKey := map[string]map[string]any{}
	for _, r := range rows {
		if got := slices.Sorted(maps.Keys(r)); !slices.Equal(got, want) {
			t.Errorf("fields %v, want %v", got, want)
		}
		byKey[r["key"].(string)] = r
	}
	if len(byKey) != 3 {
		t.Fatalf("rows %v, want held, released and expired", rows)
	}
	held, rel, exp := byKey["held"], byKey["released"], byKey["expired"]
	if held["live"] != true || held["owner"] != "owner-held" || held["running"] != true || held["expires_in_ms"].(float64) < 3_500_000 {
		t.Errorf("held lease shown as %v", held)
	}
	if rel["live"] != false || rel["released"] != true {
		t.Errorf("released lease shown as %v", rel)
	}
	if exp["live"] != false || exp["released"] != false || exp["expires_in_ms"].(float64) >= 0 {
		t.Errorf("expired lease shown as %v", exp)
	}

	stdout, _, _ = runTenure(t, nil, "status", "--store", url, "--json", "--prefix", "rel")
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 || rows[0]["key"] != "released" {
		t.Errorf("--prefix rel gave %q", stdout)
	}
}

func TestStatusTableShowsEachLeaseState(t *testing.T) {
	t.Parallel()
	url := seed(t)
	// The store comes from TENURE_STORE here.
	stdout, stderr, code := runTenure(t, []string{"TENURE_STORE=" + url}, "status")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^KEY\s+OWNER\s+EPOCH\s+STATE\s+RUNNING\s+TIME LEFT$`),
		regexp.MustCompile(`(?m)^held\s+owner-held\s+1\s+held\s+yes\s+(59m|1h)`),
		regexp.MustCompile(`(?m)^released\s+owner-released\s+1\s+released\s+\S+\s+-$`),
		regexp.MustCompile(`(?m)^expired\s+owner-expired\s+1\s+expired\s+\S+\s+expired .* ago$`),
	} {
		if !want.MatchString(stdout) {
			t.Errorf("table does not match %s:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\x1b") {
		t.Error("escape codes in output that is not a terminal")
	}
	if first, _, _ := strings.Cut(stdout, "\n"); first != "store "+url {
		t.Errorf("the table starts with %q, want the store it read (%q)", first, "store "+url)
	}

	// --live leaves out everything but live leases.
	stdout, _, _ = runTenure(t, []string{"TENURE_STORE=" + url}, "status", "--live")
	if !strings.Contains(stdout, "owner-held") || strings.Contains(stdout, "owner-released") || strings.Contains(stdout, "owner-expired") {
		t.Errorf("status --live shows more than the live lease:\n%s", stdout)
	}
}

func TestStatusNamesTheStoreWithoutItsPassword(t *testing.T) {
	t.Parallel()
	url := postgresTable(t, "cli_status_store")
	if _, stderr, code := runTenure(t, nil, "migrate", "--store", url); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	// Trust auth ignores the password; status must not show it anyway.
	withPassword := strings.Replace(url, "postgres://postgres@", "postgres://postgres:hunter2secret@", 1)
	stdout, stderr, code := runTenure(t, nil, "status", "--store", withPassword)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stdout+stderr, "hunter2secret") {
		t.Fatalf("the password shows:\n%s%s", stdout, stderr)
	}
	if first, _, _ := strings.Cut(stdout, "\n"); !strings.HasPrefix(first, "store postgres://postgres:") || !strings.Contains(first, "cli_status_store") {
		t.Errorf("status does not name the store it read: %q", first)
	}
}

func TestStatusWatchRedrawsUntilInterrupted(t *testing.T) {
	t.Parallel()
	url := seed(t)
	p := start(t, nil, "status", "--store", url, "--watch")
	time.Sleep(2500 * time.Millisecond)
	if err := p.cmd.Process.Signal(interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Errorf("exit %d after SIGINT", code)
	}
	if n := strings.Count(p.out.String(), "KEY "); n < 2 {
		t.Errorf("%d tables in 2.5s, want one a second:\n%s", n, p.out.String())
	}
}

// oneLineError checks the usage-error contract: exit 2, one line on stderr.
func oneLineError(t *testing.T, stderr string, code int, wantCode int, mention string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit %d, want %d; stderr: %q", code, wantCode, stderr)
	}
	if lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "tenure: ") {
		t.Errorf("stderr is not one 'tenure: …' line: %q", stderr)
	}
	if !strings.Contains(stderr, mention) {
		t.Errorf("stderr %q does not mention %q", stderr, mention)
	}
}

func TestBadInputIsAUsageErrorOnOneLine(t *testing.T) {
	t.Parallel()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	cases := []struct {
		name    string
		env     []string
		args    []string
		mention string
	}{
		{"unknown scheme", nil, []string{"run", "--key", "k", "--store", "mongodb://h/db", "--", "true"}, "unknown scheme"},
		{"path without scheme", nil, []string{"status", "--store", "/var/lib/x.db"}, "sqlite:/var/lib/x.db"},
		{"bad duration", nil, []string{"run", "--key", "k", "--ttl", "ten", "--", "true"}, "--ttl"},
		{"bad duration from env", []string{"TENURE_STOP_TIMEOUT=soon"}, []string{"run", "--key", "k", "--", "true"}, "TENURE_STOP_TIMEOUT"},
		{"control character in key", nil, []string{"run", "--key", "a\x01b", "--store", dbURL, "--", "true"}, "key"},
		{"key too long", nil, []string{"run", "--key", strings.Repeat("k", 513), "--store", dbURL, "--", "true"}, "513 bytes"},
		{"missing key", nil, []string{"run", "--store", dbURL, "--", "true"}, "--key is required"},
		{"missing command", nil, []string{"run", "--key", "k", "--store", dbURL}, "missing command"},
		{"command without --", nil, []string{"run", "--key", "k", "--store", dbURL, "true"}, "after --"},
		{"empty command after --", nil, []string{"run", "--key", "k", "--store", dbURL, "--"}, "missing command"},
		{"ttl too short", nil, []string{"run", "--key", "k", "--store", dbURL, "--ttl", "1ms", "--", "true"}, "--ttl"},
		{"stop timeout beyond the margin", nil, []string{"run", "--key", "k", "--store", dbURL, "--ttl", "3s", "--grace", "1s", "--", "true"}, "--stop-timeout"},
		{"failure window the backoff cannot fit", nil, []string{"run", "--key", "k", "--store", dbURL, "--failure-window", "10s", "--", "true"}, "--failure-window 10s"},
		{"negative cooldown", nil, []string{"run", "--key", "k", "--store", dbURL, "--cooldown", "-1s", "--", "true"}, "--cooldown"},
		{"negative max failures", nil, []string{"pool", "--keys", "a", "--store", dbURL, "--max-failures", "-1", "--", "true"}, "--max-failures"},
		{"renew-every beyond ttl/2", nil, []string{"run", "--key", "k", "--store", dbURL, "--renew-every", "8s", "--", "true"}, "--renew-every"},
		{"stop timeout beyond a short renew-every's margin", nil, []string{"run", "--key", "k", "--store", dbURL, "--renew-every", "1s", "--grace", "1s", "--stop-timeout", "3s", "--", "true"}, "--stop-timeout"},
		{"public http", nil, []string{"run", "--key", "k", "--store", dbURL, "--http", ":9090", "--", "true"}, "--http-public"},
		{"unknown flag", nil, []string{"run", "--kee", "k", "--", "true"}, "--kee"},
		{"unknown command", nil, []string{"frobnicate"}, "frobnicate"},
		{"mistyped command", nil, []string{"stauts"}, `unknown command "stauts" for "tenure"; did you mean "status"?`},
		{"bad log level", nil, []string{"run", "--key", "k", "--store", dbURL, "--log-level", "loud", "--", "true"}, "--log-level"},
		{"bad log level on a command that logs nothing", nil, []string{"status", "--store", dbURL, "--log-level", "loud"}, "--log-level"},
		{"bad log format", nil, []string{"run", "--key", "k", "--store", dbURL, "--log-format", "yaml", "--", "true"}, "--log-format"},
		{"empty key list", nil, []string{"pool", "--keys", "", "--store", dbURL, "--", "true"}, "--keys"},
		{"key list of commas", nil, []string{"pool", "--keys", " , ,", "--store", dbURL, "--", "true"}, "--keys"},
		{"unknown scheme from env", []string{"TENURE_STORE=mongodb://h/db"}, []string{"status"}, "TENURE_STORE (from the environment)"},
		{"bad log format from env", []string{"TENURE_LOG_FORMAT=xml"}, []string{"status", "--store", dbURL}, "TENURE_LOG_FORMAT"},
		{"release without a terminal", nil, []string{"release", "--key", "k", "--store", dbURL}, "--yes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runTenure(t, c.env, c.args...)
			oneLineError(t, stderr, code, 2, c.mention)
		})
	}
}

func TestMissingCommandExitsLikeAShell(t *testing.T) {
	t.Parallel()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	_, stderr, code := runTenure(t, nil, "run", "--key", "k", "--store", dbURL, "--", "no-such-command-here")
	oneLineError(t, stderr, code, 127, "command not found")
}

var addrRE = regexp.MustCompile(`serving /metrics.* addr=(127\.0\.0\.1:\d+)`)

// httpAddr reads the address tenure reports it listens on.
func httpAddr(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := addrRE.FindStringSubmatch(p.out.String()); m != nil {
			return m[1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("tenure did not report its HTTP address:\n%s", p.out.String())
	return ""
}

func get(t *testing.T, url string) string {
	t.Helper()
	code, body := probeRaw(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	return body
}

func TestHTTPServesMetricsStatusAndHealth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "leases.db")
	p := start(t, childEnv("record", filepath.Join(dir, "log")), "run", "--key", "served", "--store", url,
		"--owner", "replica-http", "--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(),
		"--http", "127.0.0.1:0", "--", self(t))
	addr := httpAddr(t, p)
	waitStarts(t, filepath.Join(dir, "log"), 1, 10*time.Second)
	time.Sleep(ttl / 2) // a renewal round or two

	if body := get(t, "http://"+addr+"/healthz"); strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %q", body)
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(get(t, "http://"+addr+"/metrics")))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	for _, name := range []string{"tenure_leases_held", "tenure_acquisitions_total", "tenure_renewals_total", "go_goroutines", "process_cpu_seconds_total"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if f := families["tenure_leases_held"]; f != nil {
		if v := f.GetMetric()[0].GetGauge().GetValue(); v != 1 {
			t.Errorf("tenure_leases_held = %v, want 1", v)
		}
	}

	var doc struct {
		Owner string `json:"owner"`
		Keys  []struct {
			Key        string `json:"key"`
			Running    bool   `json:"running"`
			LeaderHere bool   `json:"leader_here"`
		} `json:"keys"`
		Leases []map[string]any `json:"leases"`
	}
	if err := json.Unmarshal([]byte(get(t, "http://"+addr+"/status")), &doc); err != nil {
		t.Fatal(err)
	}
	if tenure.OwnerName(doc.Owner) != "replica-http" || len(doc.Keys) != 1 || doc.Keys[0].Key != "served" || !doc.Keys[0].Running || !doc.Keys[0].LeaderHere {
		t.Errorf("/status = %+v", doc)
	}
	if len(doc.Leases) != 1 || ownerName(doc.Leases[0]["owner"]) != "replica-http" || doc.Leases[0]["live"] != true {
		t.Errorf("/status leases = %v", doc.Leases)
	}
	if page := get(t, "http://"+addr+"/"); !strings.Contains(page, "<title>Tenure console</title>") {
		t.Errorf("/ is not the console: %.200s", page)
	}
	// A name that is not this host's (DNS rebinding) reads nothing.
	req, _ := http.NewRequest("GET", "http://"+addr+"/status", nil)
	req.Host = "attacker.example"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("/status for Host attacker.example: %d, want 421", res.StatusCode)
	}
}

func TestReleaseRevokesTheHoldersLeaseAndItsCommandStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	url := "sqlite:" + filepath.Join(dir, "leases.db")
	start(t, childEnv("record", log), "run", "--key", "revoked", "--store", url,
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	first := waitStarts(t, log, 1, 10*time.Second)[0]

	stdout, stderr, code := runTenure(t, nil, "release", "--key", "revoked", "--store", url, "--yes")
	if code != 0 || !strings.Contains(stdout, "revoked") {
		t.Fatalf("release: exit %d\n%s%s", code, stdout, stderr)
	}
	// The holder's next renewal is refused: its command gets SIGTERM.
	deadline := time.Now().Add(ttl)
	for {
		stopped := slices.ContainsFunc(readChildLog(t, log), func(ev childEvent) bool { return ev.what == "stop" && ev.pid == first.pid })
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder's command was not stopped after the revocation")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stdout, _, _ = runTenure(t, nil, "status", "--store", url)
	if !regexp.MustCompile(`(?m)^revoked\s+-\s+2\s+revoked\s`).MatchString(stdout) {
		t.Errorf("status after release:\n%s", stdout)
	}
	stdout, _, code = runTenure(t, nil, "release", "--key", "nothing-here", "--store", url, "--yes")
	if code != 0 || !strings.Contains(stdout, "no live lease") {
		t.Errorf("release of a free key: exit %d, %q", code, stdout)
	}
}

func TestMigrateVersionAndHelp(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	if stdout, stderr, code := runTenure(t, nil, "migrate", "--store", url); code != 0 || !strings.Contains(stdout, "migrated") {
		t.Errorf("migrate: exit %d %s%s", code, stdout, stderr)
	}
	version, _, code := runTenure(t, nil, "version")
	if code != 0 || !strings.HasPrefix(version, "tenure ") {
		t.Errorf("version: exit %d %q", code, version)
	}
	if stdout, _, code := runTenure(t, nil, "--version"); code != 0 || stdout != version {
		t.Errorf("--version: exit %d %q, want what version prints (%q)", code, stdout, version)
	}
	for _, cmd := range []string{"run", "pool", "status", "release", "migrate", "version", "demo"} {
		stdout, _, code := runTenure(t, nil, cmd, "--help")
		if code != 0 || !strings.Contains(stdout, "Examples:") {
			t.Errorf("%s --help: exit %d, no examples:\n%s", cmd, code, stdout)
		}
	}
	if stdout, _, _ := runTenure(t, nil, "run", "--help"); !strings.Contains(stdout, "Exit codes:") || !strings.Contains(stdout, "TENURE_EPOCH") {
		t.Errorf("run --help does not document exit codes and the command's environment:\n%s", stdout)
	}
	if stdout, _, code := runTenure(t, nil, "completion", "bash"); code != 0 || !strings.Contains(stdout, "tenure") {
		t.Errorf("completion bash: exit %d", code)
	}
}

func TestDemoShowsCrashTakeoverAndHandoffOnItsOwn(t *testing.T) {
	t.Parallel()
	began := time.Now()
	stdout, stderr, code := runTenure(t, nil, "demo")
	took := time.Since(began)
	if code != 0 {
		t.Fatalf("demo exit %d\n%s%s", code, stdout, stderr)
	}
	if took > 20*time.Second {
		t.Errorf("demo took %v", took)
	}
	for _, want := range []string{"crashes", "took over nightly-report", "shuts down gracefully", "took over mailer", "At no moment did two replicas run the same key"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "\x1b") {
		t.Error("escape codes in demo output to a pipe")
	}
	if m := regexp.MustCompile(`store: (\S+)`).FindStringSubmatch(stdout); m == nil {
		t.Error("demo does not name its store")
	} else if _, err := os.Stat(filepath.Dir(m[1])); !os.IsNotExist(err) {
		t.Errorf("demo left %s behind (stat: %v)", filepath.Dir(m[1]), err)
	}
}

func TestRedisStoreWorksFromTheCommandLine(t *testing.T) {
	t.Parallel()
	base := testenv.Redis.URL(t)
	ns := "cli_test_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	url := base + "?namespace=" + ns
	t.Cleanup(func() { deleteNamespace(t, base, ns) })
	dir := t.TempDir()
	p := start(t, childEnv("record", filepath.Join(dir, "log")), "run", "--key", "on-redis", "--store", url,
		"--owner", "redis-replica", "--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
	waitStarts(t, filepath.Join(dir, "log"), 1, 10*time.Second)
	stdout, stderr, code := runTenure(t, nil, "status", "--store", url, "--json")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &rows) != nil || len(rows) != 1 || ownerName(rows[0]["owner"]) != "redis-replica" {
		t.Errorf("status on Redis: exit %d %s%s", code, stdout, stderr)
	}
	if stdout, _, code := runTenure(t, nil, "migrate", "--store", url); code != 0 || !strings.Contains(stdout, "needs no migration") {
		t.Errorf("migrate on Redis: exit %d %q", code, stdout)
	}
	if err := p.cmd.Process.Signal(interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d after SIGINT", code)
	}
}

// deleteNamespace removes a test's keys from Redis.
func deleteNamespace(t *testing.T, url, ns string) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Logf("clean up %s: %v", ns, err)
		return
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, "{"+ns+"}*", 100).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// ownerName is the --owner name in an owner id read from JSON.
func ownerName(id any) string {
	s, _ := id.(string)
	return tenure.OwnerName(s)
}
