package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate forwards TCP connections to a server until it is shut, when it
// drops every connection and refuses new ones: the server, as far as the
// client can tell, has stopped.
type gate struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	shut     bool
	conns    []net.Conn
}

func newGate(t *testing.T, upstream string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); g.setShut(true) })
	go g.accept()
	return g
}

func (g *gate) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		shut := g.shut
		g.mu.Unlock()
		up, err := net.Dial("tcp", g.upstream)
		if shut || err != nil {
			c.Close()
			if up != nil {
				up.Close()
			}
			continue
		}
		g.mu.Lock()
		g.conns = append(g.conns, c, up)
		g.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (g *gate) setShut(shut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = shut
	if shut {
		for _, c := range g.conns {
			c.Close()
		}
		g.conns = nil
	}
}

// probeRaw GETs url and returns the status code and body.
func probeRaw(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// probe is probeRaw with the body trimmed, as a probe's one line.
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	code, body := probeRaw(t, url)
	return code, strings.TrimSpace(body)
}

// waitProbe polls url until it answers code, and returns the body.
func waitProbe(t *testing.T, url string, code int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, body := probe(t, url)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q for %v, want %d", url, got, body, within, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHealthStaysUpAndReadinessFollowsTheStoreOnPostgres runs tenure
// against PostgreSQL through a gate and stops the server, as far as
// tenure can tell, by shutting the gate: /healthz stays 200 (the process
// is fine; restarting it would not bring the store back), /readyz turns
// 503 naming the store error within two rounds, and both are 200 once
// the server is back and the key is held again.
func TestHealthStaysUpAndReadinessFollowsTheStoreOnPostgres(t *testing.T) {
	url := postgresTable(t, "cli_health")
	host := strings.TrimPrefix(url, "postgres://")
	host = host[strings.Index(host, "@")+1:]
	host = host[:strings.Index(host, "/")]
	g := newGate(t, host)
	url = strings.Replace(url, host, g.ln.Addr().String(), 1)

	dir := t.TempDir()
	p := start(t, childEnv("record", filepath.Join(dir, "log")), "run", "--key", "served", "--store", url,
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(),
		"--http", "127.0.0.1:0", "--", self(t))
	base := "http://" + httpAddr(t, p)
	waitStarts(t, filepath.Join(dir, "log"), 1, 10*time.Second)
	waitProbe(t, base+"/readyz", http.StatusOK, time.Second)
	waitProbe(t, base+"/healthz", http.StatusOK, time.Second)

	g.setShut(true)
	renewEvery := ttl / 3
	shut := time.Now()
	body := waitProbe(t, base+"/readyz", http.StatusServiceUnavailable, 3*renewEvery+time.Second)
	t.Logf("/readyz 503 %v after the store went: %s", time.Since(shut).Round(time.Millisecond), body)
	if !strings.Contains(body, "store not reached") {
		t.Errorf("/readyz says %q, want it to say the store is not reached", body)
	}
	time.Sleep(2 * ttl) // the lease expires meanwhile; the process stays alive
	if code, body := probe(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with the store down: %d %q, want 200", code, body)
	}

	g.setShut(false)
	waitProbe(t, base+"/readyz", http.StatusOK, ttl+grace+5*time.Second)
}

// TestRunIsReadyOnlyWhileSomeoneHoldsTheKey: a replica whose command
// fails, and that has handed the key over (--max-failures 1), is unready
// while nobody holds the key, and ready again once a healthy peer does.
func TestRunIsReadyOnlyWhileSomeoneHoldsTheKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "leases.db")
	args := func(extra ...string) []string {
		return append([]string{"run", "--key", "served", "--store", url, "--ttl", ttl.String(), "--grace", grace.String(),
			"--stop-timeout", stopTimeout.String()}, append(extra, "--", self(t))...)
	}
	bad := start(t, childEnv("exit:3", filepath.Join(dir, "log")), args("--max-failures", "1", "--cooldown", "1m", "--http", "127.0.0.1:0")...)
	base := "http://" + httpAddr(t, bad)
	waitOutput(t, bad, "handing the key over to a peer", 10*time.Second)
	body := waitProbe(t, base+"/readyz", http.StatusServiceUnavailable, time.Second)
	if !strings.Contains(body, "no live holder of served") {
		t.Errorf("/readyz says %q, want it to say nobody holds the key", body)
	}
	start(t, childEnv("record", filepath.Join(dir, "log")), args()...)
	waitStarts(t, filepath.Join(dir, "log"), 1, 10*time.Second)
	waitProbe(t, base+"/readyz", http.StatusOK, ttl) // it sees the peer at its next read of the table
	if code, _ := probe(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d, want 200 throughout", code)
	}
}

func TestJSONLogsAreOneObjectALineWithTheKeyEpochAndOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, stderr, code := runTenure(t, childEnv("exit:0", filepath.Join(dir, "log")), "run", "--once", "--key", "nightly",
		"--store", "sqlite:"+filepath.Join(dir, "leases.db"), "--owner", "json-replica", "--log-format", "json", "--", self(t))
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	var started bool
	for line := range strings.Lines(strings.TrimSpace(stderr)) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON object: %q: %v", line, err)
		}
		if rec["msg"] == "runner started" {
			started = rec["key"] == "nightly" && rec["epoch"] == float64(1) && strings.HasPrefix(fmt.Sprint(rec["owner"]), "json-replica#")
		}
		if ttl, ok := rec["ttl"]; ok && ttl != "15s" {
			t.Errorf("ttl logged as %v, want \"15s\"", ttl)
		}
	}
	if !started {
		t.Fatalf("no \"runner started\" record with key, epoch and owner:\n%s", stderr)
	}
}
