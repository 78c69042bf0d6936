package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

const secret = "S3cr3t-hunter2"

// withPassword returns the test server's URL with a password, in another
// database when database is not empty.
func withPassword(t *testing.T, database string) *url.URL {
	u := testenv.WithPassword(t, testenv.Postgres.URL(t), "postgres", secret)
	if database != "" {
		u.Path = "/" + database
	}
	q := u.Query()
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	return u
}

func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	closed := withPassword(t, "")
	closed.Host = testenv.ClosedAddr(t)
	errs := storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"closed port":    closed.String(),
		"wrong database": withPassword(t, "tenure_no_such_database").String(),
	}, nil, secret)
	if err := errs["wrong database"]; err != nil && !strings.Contains(err.Error(), "tenure_no_such_database") {
		t.Errorf("the error does not say what is wrong: %v", err)
	}
}

func TestOpenRejectsMalformedURLsWithoutShowingThePassword(t *testing.T) {
	storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"unclosed IPv6 host": "postgres://u:" + secret + "@[::1/db",
		"bad port":           "postgres://u:" + secret + "@localhost:port/db",
		"bad escape":         "postgres://u:pa%zz" + secret + "@localhost/db",
		"other scheme":       "mysql://u:" + secret + "@localhost/db",
		"no scheme":          "host=localhost password=" + secret,
		"bad parameter":      "postgres://u:" + secret + "@localhost/db?sslmode=sometimes",
		"bad timeout":        "postgres://u:" + secret + "@localhost/db?connect_timeout=soon",
		"password parameter": "postgres://u@localhost/db?password=" + secret + "&sslmode=sometimes",
		"two tables":         "postgres://u:" + secret + "@localhost/db?table=a&table=b",
		"bad table":          "postgres://u:" + secret + "@localhost/db?table=a-b",
	}, store.ErrInvalidURL, secret, "pa%zz"+secret)
}

// A parameter that is neither pgx's nor a PostgreSQL setting would be sent
// to the server as a setting and fail the connection there; Open refuses
// it first, as the URL's fault. The address is closed, so any attempt to
// connect would fail with another error.
func TestOpenRefusesUnknownParametersBeforeConnecting(t *testing.T) {
	base := "postgres://u:" + secret + "@" + testenv.ClosedAddr(t) + "/db?connect_timeout=2&"
	says := map[string]string{
		"misspelt pgx option":        `unknown parameter "sslmod": did you mean ?sslmode=`,
		"pgx option in another case": `unknown parameter "SSLMode": did you mean ?sslmode=`,
		"misspelt pool option":       `unknown parameter "pool_max_con": did you mean ?pool_max_conns=`,
		"misspelt setting":           `unknown parameter "serch_path": did you mean ?search_path=`,
		"misspelt table":             `unknown parameter "tabel": did you mean ?table=`,
		"options in another case":    `unknown parameter "Options": did you mean ?options=`,
		"libpq option pgx lacks":     `unknown parameter "keepalives": neither a pgx option nor a PostgreSQL setting`,
		"unknown setting":            `unknown parameter "frobnicate": neither a pgx option nor a PostgreSQL setting`,
	}
	errs := storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"misspelt pgx option":        base + "sslmod=disable",
		"pgx option in another case": base + "SSLMode=disable",
		"misspelt pool option":       base + "pool_max_con=4",
		"misspelt setting":           base + "serch_path=ops",
		"misspelt table":             base + "tabel=jobs",
		"options in another case":    base + "Options=-c%20search_path%3Dops",
		"libpq option pgx lacks":     base + "keepalives=1",
		"unknown setting":            base + "frobnicate=1&search_path=ops",
	}, store.ErrInvalidURL, secret)
	for name, err := range errs {
		if err != nil && !strings.Contains(err.Error(), says[name]) {
			t.Errorf("%s: %v, want it to say %s", name, err, says[name])
		}
	}
}

// pgx's options, PostgreSQL's settings in any case (the server compares
// them so) and an extension's dotted settings pass, and the server takes
// them.
func TestOpenPassesPgxOptionsAndServerSettings(t *testing.T) {
	for _, q := range []string{
		"sslmode=disable", "ssl=true", "dbname=other", "pool_max_conns=4", "pool_max_conn_lifetime=1h",
		"default_query_exec_mode=exec", "statement_cache_capacity=64",
		"search_path=public", "Search_Path=public", "application_name=x", "TimeZone=UTC", "timezone=UTC",
		"pg_stat_statements.track=all", "options=-c%20work_mem%3D8MB",
		"role=postgres",                   // not listed by pg_settings
		"debug_parallel_query=off",        // PostgreSQL 16
		"transaction_timeout=5s",          // PostgreSQL 17
		"idle_replication_slot_timeout=0", // PostgreSQL 18
	} {
		if _, _, err := takeQuery("postgres://u@localhost/db?" + q); err != nil {
			t.Errorf("?%s refused: %v", q, err)
		}
	}

	u, err := url.Parse(testenv.Postgres.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	// Written by hand: url.Values.Encode would write the space as '+',
	// which pgx, like libpq, reads as a plus.
	params := "search_path=public&application_name=tenure_test&pool_max_conns=4" +
		"&pg_stat_statements.track=all&TimeZone=UTC&options=-c%20work_mem%3D8MB"
	if u.RawQuery != "" {
		params = "&" + params
	}
	u.RawQuery += params
	s, err := Open(testenv.Context(t), u.String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var app, workMem string
	err = s.pool.QueryRow(testenv.Context(t), `SELECT current_setting('application_name'), current_setting('work_mem')`).Scan(&app, &workMem)
	if err != nil || app != "tenure_test" || workMem != "8MB" {
		t.Fatalf("application_name %q, work_mem %q, %v", app, workMem, err)
	}
}

// ?table= is Tenure's: Open takes it out of what pgx sees (the server
// would refuse it as a setting) and uses it unless Options.Table is set.
func TestOpenUsesTheURLsTable(t *testing.T) {
	u, err := url.Parse(testenv.Postgres.URL(t))
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
		if err := s.Drop(testenv.Context(t)); err != nil {
			t.Error(err)
		}
	}()
	if s.Table() != table {
		t.Fatalf("table %q, want %q", s.Table(), table)
	}
	testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Second)

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
	url := testenv.Postgres.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tables.CheckBadTableNamesAreRefused(t, func(name string) error {
		_, err := New(pool, Options{Table: name})
		return err
	})
	s, err := New(pool, Options{})
	if err != nil || s.Table() != DefaultTable {
		t.Fatalf("default table: %v, %v", s, err)
	}
}

func TestTableNameKeepsItsCase(t *testing.T) {
	s := tables.OpenTable(t, "Mixed_"+testenv.UniqueName("tenure_test_"), true)
	testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Second)
	var n int
	err := s.pool.QueryRow(testenv.Context(t), `SELECT count(*) FROM pg_tables WHERE tablename = $1`, s.table).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("table %q not found with its exact name: %d, %v", s.table, n, err)
	}
}

func TestNewUsesTheCallersPoolAndLeavesItOpen(t *testing.T) {
	ctx := testenv.Context(t)
	url := testenv.Postgres.URL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := New(pool, Options{Table: testenv.UniqueName("tenure_test_")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // s is closed by then; the pool is not
		d, err := New(pool, Options{Table: s.table})
		if err == nil {
			err = d.Drop(ctx)
		}
		if err != nil {
			t.Error(err)
		}
	}()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.MustAcquire(t, s, "job", "a", time.Minute, time.Second)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("the caller's pool was closed with the store: %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New accepted a nil pool")
	}
}

func TestConcurrentFirstCallsCreateTheTableOnce(t *testing.T) {
	tables.CheckFirstCallsRaceToCreateOneTable(t)
}

func TestWithoutAutoMigrateTheTableComesFromMigrate(t *testing.T) {
	tables.CheckMigrateCreatesTheTable(t)
}

func TestReadOnlyNeverCreatesTheTableAndRefusesWrites(t *testing.T) {
	tables.CheckReadOnlyOpenCreatesNothing(t, func(ctx context.Context, url, table string) (*Store, error) {
		return Open(ctx, url, Options{Table: table, ReadOnly: true})
	})
}
