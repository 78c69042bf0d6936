package mysql

import (
	"database/sql"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

const secret = "S3cr3t-hunter2"

// withPassword returns the test server's URL with a password.
func withPassword(t *testing.T) *url.URL {
	u := testenv.WithPassword(t, testenv.MySQL.URL(t), "root", secret)
	q := u.Query()
	q.Set("timeout", "5s")
	u.RawQuery = q.Encode()
	return u
}

func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	closed := withPassword(t)
	closed.Host = testenv.ClosedAddr(t)
	// The test server's user has no password (or another one), so the
	// server refuses this one.
	says := map[string]string{"closed port": "refused", "wrong password": "Access denied"}
	errs := storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"closed port":    closed.String(),
		"wrong password": withPassword(t).String(),
	}, nil, secret)
	for name, err := range errs {
		if err != nil && (!strings.Contains(err.Error(), says[name]) || !strings.Contains(err.Error(), "xxxxx")) {
			t.Errorf("%s: the error does not say what is wrong, or where: %v", name, err)
		}
	}
}

func TestOpenRejectsMalformedURLsWithoutShowingThePassword(t *testing.T) {
	storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"unclosed IPv6 host": "mysql://u:" + secret + "@[::1/db",
		"bad port":           "mysql://u:" + secret + "@localhost:port/db",
		"port out of range":  "mysql://u:" + secret + "@localhost:70000/db",
		"bad escape":         "mysql://u:pa%zz" + secret + "@localhost/db",
		"other scheme":       "postgres://u:" + secret + "@localhost/db",
		"no scheme":          "u:" + secret + "@tcp(localhost:3306)/db",
		"opaque":             "mysql:u:" + secret + "@localhost/db",
		"no host":            "mysql://u:" + secret + "@/db",
		"no database":        "mysql://u:" + secret + "@localhost",
		"empty database":     "mysql://u:" + secret + "@localhost/",
		"nested path":        "mysql://u:" + secret + "@localhost/db/x",
		"bad parameter":      "mysql://u:" + secret + "@localhost/db?parseTime=sometimes",
		"bad timeout":        "mysql://u:" + secret + "@localhost/db?timeout=soon",
		"two tables":         "mysql://u:" + secret + "@localhost/db?table=a&table=b",
		"bad table":          "mysql://u:" + secret + "@localhost/db?table=a-b",
		"host and socket":    "mysql://u:" + secret + "@localhost/db?socket=/tmp/mysql.sock",
		"password parameter": "mysql://u@localhost/db?password=" + secret + "&parseTime=sometimes",
		"misspelt parameter": "mysql://u:" + secret + "@localhost/db?wait_timout=10",
	}, store.ErrInvalidURL, secret, "pa%zz"+secret)
}

// A parameter that is neither the driver's nor a system variable would be
// set (SET name = value) on every connection and fail there; the URL is
// refused first, naming the nearest known parameter.
func TestParseURLRefusesUnknownParameters(t *testing.T) {
	for name, c := range map[string]struct{ query, says string }{
		"misspelt driver option":       {"parseTme=true", `unknown parameter "parseTme": did you mean ?parseTime=`},
		"driver option in lower case":  {"parsetime=true", `unknown parameter "parsetime": did you mean ?parseTime=`},
		"misspelt variable":            {"wait_timout=10", `unknown parameter "wait_timout": did you mean ?wait_timeout=`},
		"misspelt table":               {"tabel=jobs", `unknown parameter "tabel": did you mean ?table=`},
		"misspelt socket":              {"sockt=/tmp/mysql.sock", `unknown parameter "sockt": did you mean ?socket=`},
		"unknown variable":             {"frobnicate=1", `unknown parameter "frobnicate": neither a go-sql-driver/mysql option nor a MySQL or MariaDB system variable`},
		"password as a parameter":      {"password=" + secret, `unknown parameter "password"`},
		"strict, on which driver dies": {"strict=true", "?strict= was removed from go-sql-driver/mysql"},
	} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			_, _, _, _, err := parseURL("mysql://u:" + secret + "@localhost/db?timeout=5s&" + c.query)
			storetest.CheckNoSecret(t, err, secret)
			if !errors.Is(err, store.ErrInvalidURL) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%v, want store.ErrInvalidURL saying %s", err, c.says)
			}
		})
	}
}

// The driver's options (as spelt), MySQL's and MariaDB's system variables
// (in any case, as the server reads them) pass, and the server takes them.
func TestParseURLPassesDriverOptionsAndSystemVariables(t *testing.T) {
	for _, q := range []string{
		"parseTime=true", "timeout=5s", "tls=false", "charset=utf8mb4", "checkConnLiveness=true",
		"sql_mode=%27ANSI%27", "SQL_MODE=%27ANSI%27", "wait_timeout=10", "time_zone=%27%2B00%3A00%27",
		"innodb_lock_wait_timeout=5", "max_statement_time=1", // MariaDB
		"transaction_isolation=%27READ-COMMITTED%27", "max_execution_time=1000", // MySQL
		"validate_password.length=8", // a component's
	} {
		if _, _, _, _, err := parseURL("mysql://u@localhost/db?" + q); err != nil {
			t.Errorf("?%s refused: %v", q, err)
		}
	}

	u, err := url.Parse(testenv.MySQL.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("parseTime", "true")
	q.Set("timeout", "5s")
	q.Set("sql_mode", "'ANSI'")
	q.Set("WAIT_TIMEOUT", "10")
	q.Set("time_zone", "'+01:00'")
	u.RawQuery = q.Encode()
	s, err := Open(testenv.Context(t), u.String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode, zone string
	var wait int
	err = s.db.QueryRowContext(testenv.Context(t), "SELECT @@SESSION.sql_mode, @@SESSION.wait_timeout, @@SESSION.time_zone").Scan(&mode, &wait, &zone)
	if err != nil || !strings.Contains(mode, "ANSI_QUOTES") || wait != 10 || zone != "+01:00" {
		t.Fatalf("sql_mode %q, wait_timeout %d, time_zone %q, %v", mode, wait, zone, err)
	}
}

func TestParseURLFillsTheDriverConfig(t *testing.T) {
	cfg, table, shown, _, err := parseURL("mysql://app:p%40ss%2Fw@db.example:3307/tenure%2Dprod?table=jobs&tls=skip-verify&sql_mode=%27ANSI%27")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "p@ss/w" || cfg.Net != "tcp" || cfg.Addr != "db.example:3307" || cfg.DBName != "tenure-prod" {
		t.Errorf("config %+v", cfg)
	}
	if table != "jobs" || cfg.TLSConfig != "skip-verify" || cfg.Params["sql_mode"] != "'ANSI'" {
		t.Errorf("table %q, tls %q, params %v", table, cfg.TLSConfig, cfg.Params)
	}
	if !cfg.InterpolateParams || cfg.Params["time_zone"] != "'+00:00'" {
		t.Errorf("defaults not applied: interpolateParams %t, params %v", cfg.InterpolateParams, cfg.Params)
	}
	if strings.Contains(shown, "p%40ss") || !strings.Contains(shown, "xxxxx") {
		t.Errorf("shown URL %q", shown)
	}

	cfg, _, _, _, err = parseURL("mysql://[::1]/db?interpolateParams=false&time_zone=%27SYSTEM%27")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "[::1]:3306" || cfg.InterpolateParams || cfg.Params["time_zone"] != "'SYSTEM'" {
		t.Errorf("the URL's own settings were not kept: %+v", cfg)
	}

	cfg, _, _, _, err = parseURL("mysql://root@/db?socket=/run/mysqld/mysqld.sock")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "unix" || cfg.Addr != "/run/mysqld/mysqld.sock" {
		t.Errorf("socket: %+v", cfg)
	}
}

func TestParseURLGivesTheConfigurationAndTableOpenUses(t *testing.T) {
	cfg, opts, err := ParseURL("mysql://app:p%40ss@db.example/ops?table=jobs")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Passwd != "p@ss" || cfg.Addr != "db.example:3306" || cfg.DBName != "ops" || opts.Table != "jobs" || !cfg.InterpolateParams {
		t.Errorf("ParseURL = %+v, %+v", cfg, opts)
	}
	if _, _, err := ParseURL("mysql://u:" + secret + "@localhost/db?timeout=soon"); !errors.Is(err, store.ErrInvalidURL) ||
		strings.Contains(err.Error(), secret) {
		t.Errorf("bad timeout: %v, want store.ErrInvalidURL without the password", err)
	}
}

func TestOpenUsesTheURLsTable(t *testing.T) {
	u, err := url.Parse(testenv.MySQL.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	table := testenv.UniqueName("tenure_test_")
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	s, err := Open(testenv.Context(t), u.String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer func() {
		if err := dropTable(testenv.Context(t), s); err != nil {
			t.Error(err)
		}
	}()
	if s.Table() != table {
		t.Fatalf("table %q, want %q", s.Table(), table)
	}
	testenv.MustAcquire(t, s, "job", "a", ttl, grace)

	other := testenv.UniqueName("tenure_test_")
	s2, err := Open(testenv.Context(t), u.String(), Options{Table: other})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Table() != other {
		t.Fatalf("Options.Table %q did not win over the URL's: %q", other, s2.Table())
	}
}

func TestTableNamesMustBePlainIdentifiers(t *testing.T) {
	db := openHandle(t, "")
	tables.CheckBadTableNamesAreRefused(t, func(name string) error {
		_, err := New(db, Options{Table: name})
		return err
	})
	s, err := New(db, Options{})
	if err != nil || s.Table() != DefaultTable {
		t.Fatalf("default table: %v, %v", s, err)
	}
}

func TestTableNameMayBeAReservedWord(t *testing.T) {
	s := tables.OpenTable(t, "select", true)
	testenv.MustAcquire(t, s, "job", "a", ttl, grace)
	if ls := testenv.List(t, s, ""); len(ls) != 1 {
		t.Fatalf("List = %+v", ls)
	}
}

// openHandle opens a handle of its own on the test server, with extra DSN
// parameters, closed when the test ends.
func openHandle(t *testing.T, params string) *sql.DB {
	t.Helper()
	u, err := url.Parse(testenv.MySQL.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysqldrv.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	dsn := cfg.FormatDSN()
	if params != "" {
		dsn += "?" + params
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestNewUsesTheCallersHandleAndLeavesItOpen(t *testing.T) {
	ctx := testenv.Context(t)
	db := openHandle(t, "")
	s, err := New(db, Options{Table: testenv.UniqueName("tenure_test_")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // through a Store of its own: s is closed by then
		d, err := New(db, Options{Table: s.table})
		if err == nil {
			err = dropTable(testenv.Context(t), d)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	testenv.MustAcquire(t, s, "job", "a", ttl, grace)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("the caller's handle was closed with the store: %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New accepted a nil handle")
	}
}

// A handle of the caller's may prepare every statement (no
// interpolateParams), use another character set, session time zone or SQL
// mode; none of it may change a key or the clock.
func TestCallersHandleSettingsChangeNoKeyAndNoClock(t *testing.T) {
	ref := tables.New(t)
	keys := []string{"job", "Job", "job ", "é/ö", "😀", "a'b\\c"}
	for name, params := range map[string]string{
		"prepared statements": "",
		"latin1 connection":   "charset=latin1&interpolateParams=true",
		"zone ahead of UTC":   "time_zone=%27%2B05%3A00%27&interpolateParams=true",
		"zone behind UTC":     "time_zone=%27-09%3A30%27",
		"ANSI SQL mode":       "sql_mode=%27ANSI%2CNO_BACKSLASH_ESCAPES%27&interpolateParams=true",
	} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			s, err := New(openHandle(t, params), Options{Table: ref.table})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			owner := "owner-" + name
			var items []store.RenewItem
			for _, k := range keys {
				items = append(items, store.RenewItem{Key: k, Epoch: testenv.MustAcquire(t, s, k, owner, ttl, grace)})
			}
			got, err := s.Renew(testenv.Context(t), owner, ttl, items)
			if err != nil || slices.Contains(got, false) {
				t.Fatalf("Renew = %v, %v", got, err)
			}
			// The reference store reads with its own UTC session.
			ls := testenv.List(t, ref, "")
			var seen []string
			for _, l := range ls {
				if l.Owner != owner {
					continue
				}
				seen = append(seen, l.Key)
				if !l.Live || l.TimeLeft < ttl-time.Second || l.TimeLeft > ttl {
					t.Errorf("%q seen from a UTC session: %+v, want live with about %v left", l.Key, l, ttl)
				}
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			if !slices.Equal(seen, want) {
				t.Errorf("keys stored %q, want %q", seen, want)
			}
			for _, p := range []string{"é", "\xc3", "😀", "job "} {
				for _, l := range testenv.List(t, s, p) {
					if !strings.HasPrefix(l.Key, p) {
						t.Errorf("List(%q) returned %q", p, l.Key)
					}
				}
			}
			terms := make([]store.Term, len(items))
			for i, it := range items {
				terms[i] = store.Term{Key: it.Key, Epoch: it.Epoch}
			}
			if err := s.Release(testenv.Context(t), owner, terms); err != nil {
				t.Fatal(err)
			}
			for _, l := range testenv.List(t, ref, "") {
				if l.Owner == owner && !l.Released {
					t.Errorf("not released: %+v", l)
				}
			}
		})
	}
}
