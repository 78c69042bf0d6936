package postgres

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-dev/tenure/internal/testenv"
	"github.com/tenure-dev/tenure/store"
)

const secret = "S3cr3t-hunter2"

// withPassword returns the test server's URL with a password and, when
// database is not empty, another database.
func withPassword(t *testing.T, database string) *url.URL {
	t.Helper()
	u, err := url.Parse(testenv.Postgres.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	user := "postgres"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, secret)
	if database != "" {
		u.Path = "/" + database
	}
	q := u.Query()
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	return u
}

func assertNoSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range append(secrets, secret) {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error shows the password %q: %v", s, err)
		}
	}
}

func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()

	closed := withPassword(t, "")
	closed.Host = closedPort
	wrongDB := withPassword(t, "tenure_no_such_database")

	for name, u := range map[string]*url.URL{"closed port": closed, "wrong database": wrongDB} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := Open(ctx, u.String(), Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) worked", store.RedactURL(u.String()))
			}
			assertNoSecret(t, err)
			if name == "wrong database" && !strings.Contains(err.Error(), "tenure_no_such_database") {
				t.Errorf("error does not say what is wrong: %v", err)
			}
			t.Log(err)
		})
	}
}

func TestOpenRejectsMalformedURLsWithoutShowingThePassword(t *testing.T) {
	urls := map[string]string{
		"unclosed IPv6 host": "postgres://u:" + secret + "@[::1/db",
		"bad port":           "postgres://u:" + secret + "@localhost:port/db",
		"bad escape":         "postgres://u:pa%zz" + secret + "@localhost/db",
		"other scheme":       "mysql://u:" + secret + "@localhost/db",
		"no scheme":          "host=localhost password=" + secret,
		"bad parameter":      "postgres://u:" + secret + "@localhost/db?sslmode=sometimes",
		"bad timeout":        "postgres://u:" + secret + "@localhost/db?connect_timeout=soon",
		"password parameter": "postgres://u@localhost/db?password=" + secret + "&sslmode=sometimes",
	}
	for name, raw := range urls {
		t.Run(name, func(t *testing.T) {
			s, err := Open(context.Background(), raw, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open worked")
			}
			if !errors.Is(err, store.ErrInvalidURL) {
				t.Errorf("error does not wrap store.ErrInvalidURL: %v", err)
			}
			assertNoSecret(t, err, "pa%zz"+secret)
			t.Log(err)
		})
	}
}

func TestTableNamesMustBePlainIdentifiers(t *testing.T) {
	bad := []string{
		"x; drop table y", `x"y`, "x'y", "1abc", "a-b", "a b", "schema.table",
		"ñame", strings.Repeat("a", 64), "leases--",
	}
	url := testenv.Postgres.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, name := range bad {
		if _, err := New(pool, Options{Table: name}); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("New with table %q: %v, want ErrInvalidName", name, err)
		}
		if s, err := Open(context.Background(), url, Options{Table: name}); !errors.Is(err, store.ErrInvalidName) {
			if err == nil {
				s.Close()
			}
			t.Errorf("Open with table %q: %v, want ErrInvalidName", name, err)
		}
	}
	s, err := New(pool, Options{})
	if err != nil || s.Table() != DefaultTable {
		t.Fatalf("default table: %v, %v", s, err)
	}
}

func TestTableNameKeepsItsCase(t *testing.T) {
	s := openTable(t, "Mixed_"+randomTable(), true)
	mustAcquire(t, s, "job", "a", ttl, grace)
	var n int
	err := s.pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_tables WHERE tablename = $1`, s.table).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("table %q not found with its exact name: %d, %v", s.table, n, err)
	}
}

func TestNewUsesTheCallersPoolAndLeavesItOpen(t *testing.T) {
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, testenv.Postgres.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := New(pool, Options{Table: randomTable()})
	if err != nil {
		t.Fatal(err)
	}
	defer dropTable(t, s)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "job", "a", ttl, grace)
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
