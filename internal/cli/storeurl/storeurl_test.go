package storeurl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/etcd"
	"github.com/tenure-dev/tenure/store/mysql"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
	"github.com/tenure-dev/tenure/store/sqlite"
)

const secret = "hunter2-s3cret"

func TestParseChoosesTheBackendByScheme(t *testing.T) {
	cases := []struct {
		raw               string
		kind              Kind
		url               string
		table, ns, prefix string
	}{
		{"sqlite:x.db", SQLite, "sqlite:x.db", "", "", ""},
		{"sqlite:///abs/x.db?table=t1", SQLite, "sqlite:///abs/x.db?table=t1", "", "", ""},
		{"SQLite:/abs/x.db", SQLite, "SQLite:/abs/x.db", "", "", ""},
		{"postgres://u:" + secret + "@h/db?sslmode=disable&table=jobs", Postgres, "postgres://u:" + secret + "@h/db?sslmode=disable", "jobs", "", ""},
		{"postgresql://h/db", Postgres, "postgresql://h/db", "", "", ""},
		{"mysql://root:" + secret + "@h:3306/db?table=jobs&tls=true", MySQL, "mysql://root:" + secret + "@h:3306/db?tls=true", "jobs", "", ""},
		{"mysql://root@h/db", MySQL, "mysql://root@h/db", "", "", ""},
		{"redis://h:6379/0?namespace=ops", Redis, "redis://h:6379/0", "", "ops", ""},
		{"rediss://:" + secret + "@h:6380/1", Redis, "rediss://:" + secret + "@h:6380/1", "", "", ""},
		{"etcd://h:2379?prefix=ops", Etcd, "etcd://h:2379", "", "", "ops"},
		{"etcd://app:" + secret + "@h1:2379,h2:2379/?dial_timeout=2s&prefix=ops", Etcd, "etcd://app:" + secret + "@h1:2379,h2:2379/?dial_timeout=2s", "", "", "ops"},
		{"etcd://[::1]:2379,[::2]:2379", Etcd, "etcd://[::1]:2379,[::2]:2379", "", "", ""},
		{"etcd+https://app:" + secret + "@h1,h2?prefix=p#x", Etcd, "etcd+https://app:" + secret + "@h1,h2#x", "", "", "p"},
	}
	for _, c := range cases {
		spec, err := Parse(c.raw)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.raw, err)
			continue
		}
		if spec.Kind != c.kind || spec.URL != c.url || spec.Table != c.table || spec.Namespace != c.ns || spec.Prefix != c.prefix {
			t.Errorf("Parse(%q) = %+v; want kind %s, url %q, table %q, namespace %q, prefix %q", c.raw, spec, c.kind, c.url, c.table, c.ns, c.prefix)
		}
		if strings.Contains(spec.Shown, secret) {
			t.Errorf("Parse(%q).Shown = %q shows the password", c.raw, spec.Shown)
		}
	}
}

func TestEtcdEndpointListIsShownWithoutItsPassword(t *testing.T) {
	spec, err := Parse("etcd://app:" + secret + "@h1:2379,h2:2379?prefix=ops")
	if err != nil {
		t.Fatal(err)
	}
	// The endpoints stay readable: only the password is hidden.
	if want := "etcd://app:xxxxx@h1:2379,h2:2379?prefix=ops"; spec.Shown != want {
		t.Errorf("Shown = %q, want %q", spec.Shown, want)
	}
}

func TestBadURLsAreRefusedWithoutShowingThePassword(t *testing.T) {
	bad := []struct{ raw, want string }{
		{"mongodb://root:" + secret + "@h/db", "unknown scheme"},
		{"mysql://root:" + secret + "@h/db?table=bad-name", "table"},
		{"mysql://root:" + secret + "@h/db?table=a&table=b", "2 times"},
		{"mysql://root:" + secret + "@[::1/db", "does not parse"},
		{"etcd://u:" + secret + "@h:2379?prefix=9bad", "prefix"},
		{"etcd://u:" + secret + "@h1:2379,h2?prefix=a&prefix=b", "2 times"},
		{"etcd://u:" + secret + "@h1:2379,h2?prefix=%zz", "query"},
		{"/var/lib/tenure.db", "sqlite:/var/lib/tenure.db"},
		{"host=h password=" + secret, "no scheme"},
		{"postgres://u:" + secret + "@h/db?table=bad-name", "table"},
		{"postgres://u:" + secret + "@h/db?table=a&table=b", "2 times"},
		{"postgres://u:" + secret + "@[::1/db", "does not parse"},
		{"postgres://u:" + secret + "@h/db?a=%zz", "query"},
		{"redis://:" + secret + "@h/0?namespace=9bad", "namespace"},
		{"sqlite://u:" + secret + "@host/x.db", "host"},
		{"sqlite:x.db?password=" + secret, "unknown parameter"},
	}
	for _, c := range bad {
		_, err := Parse(c.raw)
		if err == nil {
			t.Errorf("Parse(%q) accepted", c.raw)
			continue
		}
		if !IsURLError(err) {
			t.Errorf("Parse(%q): %v does not wrap store.ErrInvalidURL or ErrInvalidName", c.raw, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Parse(%q): error %q shows the password", c.raw, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q): error %q does not mention %q", c.raw, err, c.want)
		}
	}
}

func TestUnknownSchemeListsTheSupportedOnes(t *testing.T) {
	_, err := Parse("mongodb://h/db")
	if err == nil || !errors.Is(err, store.ErrInvalidURL) {
		t.Fatalf("Parse: %v, want ErrInvalidURL", err)
	}
	for _, s := range []string{"sqlite:", "postgres://", "postgresql://", "mysql://", "redis://", "rediss://", "etcd://", "etcd+https://", `"mongodb"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
}

func TestDefaultStoreLivesInTheStateDirectory(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	p, err := DefaultPath()
	if err != nil || p != filepath.Join(state, "tenure", "tenure.db") {
		t.Fatalf("DefaultPath = %q, %v", p, err)
	}
	s, err := Open(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.(*sqlite.Store).Path(); got != p {
		t.Errorf("opened %s, want %s", got, p)
	}

	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", "relative/ignored")
	t.Setenv("HOME", home)
	p, err = DefaultPath()
	if err != nil || p != filepath.Join(home, ".local", "state", "tenure", "tenure.db") {
		t.Fatalf("DefaultPath without an absolute XDG_STATE_HOME = %q, %v", p, err)
	}
}

func TestDefaultURLSurvivesOddCharactersInThePath(t *testing.T) {
	state := filepath.Join(t.TempDir(), "a?b#c%d e")
	t.Setenv("XDG_STATE_HOME", state)
	raw, err := DefaultURL()
	if err != nil {
		t.Fatal(err)
	}
	path, _, err := sqlite.ParseURL(raw)
	if err != nil || path != filepath.Join(state, "tenure", "tenure.db") {
		t.Fatalf("ParseURL(%q) = %q, %v", raw, path, err)
	}
}

func TestUnreachableServersFailWithoutShowingThePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once. urlFault: the URL is wrong (a
	// usage error), rather than the server out of reach.
	for _, c := range []struct {
		raw      string
		urlFault bool
	}{
		{"postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2&table=t", false},
		{"redis://u:" + secret + "@127.0.0.1:1/0?dial_timeout=1s", false},
		{"redis://u:" + secret + "@127.0.0.1:1/0?bogus_option=1", true},
		{"mysql://u:" + secret + "@127.0.0.1:1/db?timeout=2s&table=t", false},
		{"mysql://u:" + secret + "@127.0.0.1:1", true},
		{"mysql://u:" + secret + "@127.0.0.1:99999/db", true},
		{"etcd://u:" + secret + "@127.0.0.1:1?dial_timeout=1s&prefix=p", false},
		{"etcd://u:" + secret + "@127.0.0.1:1,127.0.0.1:2?dial_timeout=1s", false},
		{"etcd://u:" + secret + "@127.0.0.1:1?no_such_option=1", true},
		{"etcd://u:" + secret + "@127.0.0.1:1/path", true},
	} {
		_, err := Open(ctx, c.raw)
		if err == nil {
			t.Errorf("Open(%s) succeeded", Redact(c.raw))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open: error %q shows the password", err)
		}
		if IsURLError(err) != c.urlFault {
			t.Errorf("Open(%s): IsURLError = %t for %v", Redact(c.raw), !c.urlFault, err)
		}
	}
}

// outcome is what Parse and Open make of a URL, every text they show in
// one string, and whether the URL was at fault.
func outcome(ctx context.Context, raw string) (msg string, urlFault bool) {
	spec, err := Parse(raw)
	if err != nil {
		return "parse: " + err.Error(), IsURLError(err)
	}
	s, err := OpenSpec(ctx, spec)
	if err == nil {
		s.Close()
		return "opened " + spec.Shown, false
	}
	return fmt.Sprintf("shown %s, public %s, open: %v", spec.Shown, spec.Public, err), IsURLError(err)
}

func TestPasswordsWithURLCharactersOrCommonWordsNeverShowNorGarbleMessages(t *testing.T) {
	type result struct {
		msg      string
		urlFault bool
	}
	// Every URL is opened at once: most wait for a refused connection.
	results := map[string]*result{}
	for _, tmpl := range testenv.UnreachableURLs {
		for _, pw := range testenv.HardPasswords {
			for _, w := range testenv.Writings(pw) {
				for _, v := range []string{w, testenv.Twin(w)} {
					results[strings.Replace(tmpl, "PW", v, 1)] = &result{}
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for raw, r := range results {
		wg.Go(func() { r.msg, r.urlFault = outcome(ctx, raw) })
	}
	wg.Wait()

	for _, tmpl := range testenv.UnreachableURLs {
		scheme, _, _ := strings.Cut(tmpl, ":")
		for _, pw := range testenv.HardPasswords {
			for _, w := range testenv.Writings(pw) {
				t.Run(scheme+"/"+w, func(t *testing.T) {
					r := results[strings.Replace(tmpl, "PW", w, 1)]
					testenv.CheckHidesPassword(t, pw, w, r.msg, results[strings.Replace(tmpl, "PW", testenv.Twin(w), 1)].msg)
					// A password is read whole, or the URL is refused as
					// malformed: never read in part.
					if r.urlFault != testenv.Misread(w) {
						t.Errorf("URL at fault: %t, want %t: %s", r.urlFault, !r.urlFault, r.msg)
					}
				})
			}
		}
	}
}

func TestPostgresTableComesFromTheURL(t *testing.T) {
	base := testenv.Postgres.URL(t)
	table := "storeurl_test_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	ctx := t.Context()
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	s, err := Open(ctx, base+sep+"table="+table)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Cleanup(func() { dropTable(t, base, table) })
	if got := s.(*postgres.Store).Table(); got != table {
		t.Fatalf("table %q, want %q", got, table)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second, Grace: time.Second})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
}

func TestPostgresWrongPasswordIsNotShown(t *testing.T) {
	base := testenv.Postgres.URL(t)
	// The test server trusts every local user, so a bad password is only
	// checked against a user that does not exist; either way it must fail
	// without echoing the secret.
	raw := strings.Replace(base, "postgres://postgres@", "postgres://nobody_here:"+secret+"@", 1)
	raw = strings.Replace(raw, "/test", "/no_such_db_for_storeurl", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if s, err := Open(ctx, raw); err == nil {
		s.Close()
		t.Skip("server accepted the made-up user; nothing to check")
	} else if strings.Contains(err.Error(), secret) {
		t.Errorf("error %q shows the password", err)
	}
}

func TestRedisNamespaceComesFromTheURL(t *testing.T) {
	base := testenv.Redis.URL(t)
	s, err := Open(t.Context(), base+"?namespace=storeurl_test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.(*redis.Store).Namespace(); got != "storeurl_test" {
		t.Fatalf("namespace %q", got)
	}
}

func TestMySQLTableComesFromTheURL(t *testing.T) {
	base := testenv.MySQL.URL(t)
	table := "storeurl_test_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	s, err := Open(t.Context(), withParam(base, "table="+table))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Cleanup(func() { dropMySQLTable(t, base, table) })
	if got := s.(*mysql.Store).Table(); got != table {
		t.Fatalf("table %q, want %q", got, table)
	}
	res, err := s.Acquire(t.Context(), store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second, Grace: time.Second})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
}

func TestMySQLWrongPasswordIsNotShown(t *testing.T) {
	base := testenv.MySQL.URL(t)
	raw := strings.Replace(base, "mysql://root@", "mysql://nobody_here:"+secret+"@", 1)
	if raw == base {
		t.Skipf("cannot put a password into %s", Redact(base))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if s, err := Open(ctx, raw); err == nil {
		s.Close()
		t.Skip("server accepted the made-up user; nothing to check")
	} else if strings.Contains(err.Error(), secret) {
		t.Errorf("error %q shows the password", err)
	}
}

func TestEtcdPrefixComesFromTheURL(t *testing.T) {
	base := testenv.Etcd.URL(t)
	prefix := "storeurl_test_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	s, err := Open(t.Context(), withParam(base, "prefix="+prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.(*etcd.Store).Prefix(); got != prefix {
		t.Fatalf("prefix %q, want %q", got, prefix)
	}
	ctx := t.Context()
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: 2 * time.Second, Grace: time.Second})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	if err := s.Release(ctx, "o", []store.Term{{Key: "k", Epoch: res.Epoch}}); err != nil {
		t.Fatal(err)
	}
}

// withParam adds one query parameter to a URL.
func withParam(base, param string) string {
	if strings.Contains(base, "?") {
		return base + "&" + param
	}
	return base + "?" + param
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

func TestMain(m *testing.M) {
	// The default store path must never land in the real home directory.
	dir, err := os.MkdirTemp("", "storeurl-home")
	if err != nil {
		panic(err)
	}
	os.Setenv("HOME", dir)
	os.Setenv("XDG_STATE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestAMisspeltTableOrNamespaceIsAUsageError(t *testing.T) {
	for _, raw := range []string{
		"postgres://u@h/db?tabel=leases",
		"postgresql://u@h/db?Table=leases",
		"mysql://u@h/db?tables=leases",
		"redis://h:6379/0?namespac=app",
		"etcd://h:2379?prefx=app",
	} {
		_, err := Parse(raw)
		if !IsURLError(err) || !strings.Contains(err.Error(), "did you mean") {
			t.Errorf("Parse(%q) = %v, want a usage error that suggests the right name", raw, err)
		}
	}
	// Driver and server parameters far from Tenure's own pass through.
	for _, raw := range []string{
		"postgres://u@h/db?sslmode=disable&application_name=x&search_path=app&table=leases",
		"mysql://u@h/db?timeout=5s&table=leases",
		"redis://h:6379/0?dial_timeout=1s&namespace=app",
	} {
		if _, err := Parse(raw); err != nil {
			t.Errorf("Parse(%q) = %v", raw, err)
		}
	}
}

// TestTakingTheTableLeavesTheOtherParametersAsWritten: pgx reads
// ?options=-c%20name%3Dvalue, the way to pass a setting its list lacks;
// re-encoding the query would turn %20 into +, which it keeps as a plus.
func TestTakingTheTableLeavesTheOtherParametersAsWritten(t *testing.T) {
	spec, err := Parse("postgres://u@h/db?options=-c%20search_path%3Dops&table=leases&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://u@h/db?options=-c%20search_path%3Dops&sslmode=disable"; spec.URL != want || spec.Table != "leases" {
		t.Errorf("Parse gave URL %q table %q, want %q and leases", spec.URL, spec.Table, want)
	}
}
