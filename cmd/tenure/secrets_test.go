package main_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

const secret = "Sup3r-s3cret-pw"

func TestPasswordsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	pg := "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2"
	redis := "redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=1s"
	cases := []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"unknown scheme", nil, []string{"status", "--store", "mongodb://root:" + secret + "@h/db"}, 2},
		{"unknown scheme from env", []string{"TENURE_STORE=mongodb://root:" + secret + "@h/db"}, []string{"status"}, 2},
		{"mysql bad table", nil, []string{"migrate", "--store", "mysql://root:" + secret + "@h/db?table=no-dashes"}, 2},
		{"mysql without a database", nil, []string{"status", "--store", "mysql://root:" + secret + "@127.0.0.1:1"}, 2},
		{"mysql unreachable", nil, []string{"status", "--store", "mysql://root:" + secret + "@127.0.0.1:1/db?timeout=1s"}, 3},
		{"etcd bad prefix", nil, []string{"status", "--store", "etcd://u:" + secret + "@h1:2379,h2?prefix=9x"}, 2},
		{"etcd unknown parameter", nil, []string{"status", "--store", "etcd://u:" + secret + "@h1:2379,h2?nope=1"}, 2},
		{"etcd unreachable", nil, []string{"status", "--store", "etcd://u:" + secret + "@127.0.0.1:1,127.0.0.1:2?dial_timeout=1s"}, 3},
		{"postgres unreachable (pool)", nil, []string{"pool", "--keys", "a,b", "--store", pg, "--", "true"}, 3},
		{"unparsable", nil, []string{"status", "--store", "postgres://u:" + secret + "@[::1/db"}, 2},
		{"bad table", nil, []string{"migrate", "--store", "postgres://u:" + secret + "@h/db?table=no-dashes"}, 2},
		{"keyword string", nil, []string{"status", "--store", "host=h password=" + secret}, 2},
		{"bad query", nil, []string{"status", "--store", "postgres://u:" + secret + "@h/db?x=%zz"}, 2},
		{"postgres unreachable (run)", nil, []string{"run", "--key", "k", "--store", pg, "--", "true"}, 3},
		{"postgres unreachable (status)", nil, []string{"status", "--store", pg}, 3},
		{"postgres unreachable (release)", nil, []string{"release", "--key", "k", "--yes", "--store", pg}, 3},
		{"postgres unreachable (migrate)", []string{"TENURE_STORE=" + pg}, []string{"migrate"}, 3},
		{"redis unreachable", nil, []string{"status", "--store", redis}, 3},
		{"redis bad option", nil, []string{"status", "--store", "redis://:" + secret + "@127.0.0.1:1/0?no_such_option=1"}, 2},
		{"bad ttl with a password in the store", nil, []string{"run", "--key", "k", "--store", pg, "--ttl", "x", "--", "true"}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runTenure(t, c.env, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, c.code, stderr)
			}
			if strings.Contains(stdout+stderr, secret) || strings.Contains(stdout+stderr, "s3cret") {
				t.Errorf("the password was printed:\n%s%s", stdout, stderr)
			}
			if stderr == "" {
				t.Error("no error message")
			}
		})
	}
}

// shows reports whether text shows any part of secret or of the password
// "p@ss:"+secret that some tests use.
func shows(text string) bool {
	return strings.Contains(text, "s3cret") || strings.Contains(text, "p@ss")
}

func TestAPasswordWithAtSignsWorksAndIsNeverPrintedByARunningReplica(t *testing.T) {
	t.Parallel()
	base := testenv.Postgres.URL(t)
	// The test server trusts local connections, so the password is sent
	// and ignored: the replica runs with a secret in its URL, written as
	// typed, '@' and ':' unencoded.
	url := strings.Replace(base, "postgres://postgres@", "postgres://postgres:p@ss:"+secret+"@", 1)
	if url == base {
		t.Skipf("cannot put a password into %s", base)
	}
	// The lease table goes into a schema of the test's own: ?table= would
	// make tenure rebuild the URL, encoding the '@', and so hide how a
	// URL is read as given.
	url += "&search_path=" + scratchSchema(t, base)
	dir := t.TempDir()
	p := start(t, childEnv("record", filepath.Join(dir, "log")), "run", "--key", "secretive", "--store", url,
		"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(),
		"--http", "127.0.0.1:0", "--log-level", "debug", "--", self(t))
	addr := httpAddr(t, p)
	waitStarts(t, filepath.Join(dir, "log"), 1, 10*time.Second)
	for _, path := range []string{"/status", "/metrics"} {
		if body := get(t, "http://"+addr+path); shows(body) {
			t.Errorf("%s shows the password: %s", path, body)
		}
	}
	if err := p.cmd.Process.Signal(interrupt); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
	if out := p.out.String(); shows(out) || !strings.Contains(out, "postgres:xxxxx@") {
		t.Errorf("the replica logged the password, or no store with it masked:\n%s", out)
	}
}

// scratchSchema creates a PostgreSQL schema that the test's cleanup drops
// with all it holds.
func scratchSchema(t *testing.T, url string) string {
	t.Helper()
	schema := testenv.UniqueName("cli_schema_")
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// readEnv reads a dump of the env child mode, waiting for it to appear.
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil && len(data) > 0 {
			vars := map[string]string{}
			for _, kv := range strings.Split(string(data), "\n") {
				name, value, _ := strings.Cut(kv, "=")
				vars[name] = value
				if shows(kv) {
					t.Errorf("%s holds the password: %s", filepath.Base(path), kv)
				}
			}
			return vars
		}
		if time.Now().After(deadline) {
			t.Fatalf("no environment in %s: %v", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCommandsGetTheStoreInUseWithoutItsCredentials(t *testing.T) {
	t.Parallel()
	base := testenv.Postgres.URL(t)
	table := testenv.UniqueName("cli_env_")
	t.Cleanup(func() { dropTable(t, base, table) })
	withPassword := testenv.WithPassword(t, base, "postgres", secret).String() + "&table=" + table
	public := strings.Replace(withPassword, ":"+secret+"@", "@", 1)
	state := t.TempDir()
	defaultStore := (&url.URL{Scheme: "sqlite", Path: filepath.Join(state, "tenure", "tenure.db")}).String()
	// Variables of tenure's that hold a secret are not passed on.
	leaky := []string{"TENURE_SCRATCH_URL=postgres://u:" + secret + "@h/db", "TENURE_HOOK=PGPASSWORD=" + secret, "XDG_STATE_HOME=" + state}
	dir := t.TempDir()
	run := func(name string, env []string, store ...string) {
		t.Run(name, func(t *testing.T) {
			dump := filepath.Join(dir, name)
			env = append(append(childEnv("env", dump), leaky...), env...)
			args := append(append([]string{"run", "--once", "--key", "k"}, store...), "--", self(t))
			if stdout, stderr, code := runTenure(t, env, args...); code != 0 || shows(stdout+stderr) {
				t.Fatalf("exit %d:\n%s%s", code, stdout, stderr)
			}
			vars := readEnv(t, dump)
			want := public
			if name == "default store" {
				want = defaultStore
			}
			if vars["TENURE_STORE"] != want {
				t.Errorf("TENURE_STORE=%s, want %s", vars["TENURE_STORE"], want)
			}
			for _, v := range []string{"TENURE_SCRATCH_URL", "TENURE_HOOK"} {
				if _, ok := vars[v]; ok {
					t.Errorf("%s was passed on", v)
				}
			}
		})
	}
	run("flag", []string{"TENURE_STORE="}, "--store", withPassword)
	run("variable", []string{"TENURE_STORE=" + withPassword})
	// Not the default store of whatever environment the command runs in.
	run("default store", []string{"TENURE_STORE="})

	t.Run("pool and its key command", func(t *testing.T) {
		keysDump, dump := filepath.Join(dir, "keys-cmd"), filepath.Join(dir, "pool")
		p := start(t, append(append(childEnv("env", dump), leaky...), "TENURE_STORE="+withPassword),
			"pool", "--keys-cmd", "env > "+keysDump+"; echo only",
			"--ttl", ttl.String(), "--grace", grace.String(), "--stop-timeout", stopTimeout.String(), "--", self(t))
		for _, path := range []string{keysDump, dump} {
			if got := readEnv(t, path)["TENURE_STORE"]; got != public {
				t.Errorf("%s: TENURE_STORE=%s, want %s", filepath.Base(path), got, public)
			}
		}
		if err := p.cmd.Process.Signal(interrupt); err != nil {
			t.Fatal(err)
		}
		p.wait(t, 10*time.Second)
	})
}

// outputOf runs tenure to completion and returns what it printed, and
// how it ended, with no testing.T, so that many can run at once.
func outputOf(ctx context.Context, args ...string) string {
	out, err := exec.CommandContext(ctx, tenureBin, args...).CombinedOutput()
	return fmt.Sprintf("%s(%v)", out, err)
}

func TestPasswordsWithURLCharactersOrCommonWordsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	commands := map[string]func(url string) []string{
		"status": func(url string) []string { return []string{"status", "--store", url} },
		"run":    func(url string) []string { return []string{"run", "--key", "k", "--store", url, "--", "true"} },
	}
	outputs := map[string]string{}
	key := func(cmd, url string) string { return cmd + " " + url }
	var urls []string
	for _, tmpl := range testenv.UnreachableURLs {
		for _, pw := range []string{"p@ss:w0rd", "Qx7/Zr9", "tcp", "postgres"} {
			for _, w := range testenv.Writings(pw) {
				urls = append(urls, strings.Replace(tmpl, "PW", w, 1), strings.Replace(tmpl, "PW", testenv.Twin(w), 1))
			}
		}
	}
	for cmd := range commands {
		for _, u := range urls {
			outputs[key(cmd, u)] = ""
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	limit := make(chan struct{}, 16)
	for cmd, args := range commands {
		for _, u := range urls {
			wg.Go(func() {
				limit <- struct{}{}
				out := outputOf(ctx, args(u)...)
				<-limit
				mu.Lock()
				outputs[key(cmd, u)] = out
				mu.Unlock()
			})
		}
	}
	wg.Wait()

	for cmd := range commands {
		for _, tmpl := range testenv.UnreachableURLs {
			scheme, _, _ := strings.Cut(tmpl, ":")
			for _, pw := range []string{"p@ss:w0rd", "Qx7/Zr9", "tcp", "postgres"} {
				for _, w := range testenv.Writings(pw) {
					t.Run(cmd+"/"+scheme+"/"+w, func(t *testing.T) {
						out := outputs[key(cmd, strings.Replace(tmpl, "PW", w, 1))]
						testenv.CheckHidesPassword(t, pw, w, out, outputs[key(cmd, strings.Replace(tmpl, "PW", testenv.Twin(w), 1))])
						if !strings.HasPrefix(out, "tenure: ") || strings.Count(out, "\n") != 1 {
							t.Errorf("not one line of error: %s", out)
						}
					})
				}
			}
		}
	}
}
