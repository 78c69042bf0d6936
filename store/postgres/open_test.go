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
	}, store.ErrInvalidURL, secret, "pa%zz"+secret)
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
	defer func() {
		if err := dropTable(ctx, s); err != nil {
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
