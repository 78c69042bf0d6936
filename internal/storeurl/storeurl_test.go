package storeurl

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/internal/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
	"github.com/tenure-dev/tenure/store/sqlite"
)

const secret = "hunter2-s3cret"

func TestParseChoosesTheBackendByScheme(t *testing.T) {
	cases := []struct {
		raw       string
		kind      Kind
		url       string
		table, ns string
	}{
		{"sqlite:x.db", SQLite, "sqlite:x.db", "", ""},
		{"sqlite:///abs/x.db?table=t1", SQLite, "sqlite:///abs/x.db?table=t1", "", ""},
		{"SQLite:/abs/x.db", SQLite, "SQLite:/abs/x.db", "", ""},
		{"postgres://u:" + secret + "@h/db?sslmode=disable&table=jobs", Postgres, "postgres://u:" + secret + "@h/db?sslmode=disable", "jobs", ""},
		{"postgresql://h/db", Postgres, "postgresql://h/db", "", ""},
		{"redis://h:6379/0?namespace=ops", Redis, "redis://h:6379/0", "", "ops"},
		{"rediss://:" + secret + "@h:6380/1", Redis, "rediss://:" + secret + "@h:6380/1", "", ""},
	}
	for _, c := range cases {
		spec, err := Parse(c.raw)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.raw, err)
			continue
		}
		if spec.Kind != c.kind || spec.URL != c.url || spec.Table != c.table || spec.Namespace != c.ns {
			t.Errorf("Parse(%q) = %+v; want kind %s, url %q, table %q, namespace %q", c.raw, spec, c.kind, c.url, c.table, c.ns)
		}
		if strings.Contains(spec.Shown, secret) {
			t.Errorf("Parse(%q).Shown = %q shows the password", c.raw, spec.Shown)
		}
	}
}

func TestBadURLsAreRefusedWithoutShowingThePassword(t *testing.T) {
	bad := []struct{ raw, want string }{
		{"mysql://root:" + secret + "@h/db", "unknown scheme"},
		{"etcd://u:" + secret + "@h:2379", "unknown scheme"},
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
	for _, s := range []string{"sqlite:", "postgres://", "redis://", `"mongodb"`} {
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
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once.
	for _, raw := range []string{
		"postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=2&table=t",
		"redis://u:" + secret + "@127.0.0.1:1/0?dial_timeout=1s",
		"redis://u:" + secret + "@127.0.0.1:1/0?bogus_option=1",
	} {
		_, err := Open(ctx, raw)
		if err == nil {
			t.Errorf("Open(%s) succeeded", Redact(raw))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open: error %q shows the password", err)
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

func dropTable(t *testing.T, url, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Logf("drop %s: %v", table, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
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

func TestSecretsFindsEveryPasswordForm(t *testing.T) {
	for _, raw := range []string{
		"postgres://u:" + secret + "@h/db",
		"postgres://u:" + url.QueryEscape(secret+"/x") + "@h/db",
		"postgres://h/db?password=" + secret,
		"redis://:" + secret + "@[bad",
		"host=h password='" + secret + "'",
		"host=h password=" + secret + " user=u",
	} {
		secrets := Secrets(raw)
		if got := Scrub(raw, secrets); strings.Contains(got, secret) {
			t.Errorf("Scrub(%q) = %q", raw, got)
		}
	}
	if s := Secrets("postgres://u@h/db?sslmode=disable"); len(s) != 0 {
		t.Errorf("Secrets of a URL without a password = %q", s)
	}
}
