package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// Store kinds the harness can test.
const (
	kindSQLite   = "sqlite"
	kindPostgres = "postgres"
	kindRedis    = "redis"
)

// backend says how to reach the store under test, with the scratch names
// of one run: a table (SQL) or namespace (Redis) of its own, so that a run
// never touches leases it did not create.
type backend struct {
	Kind string `json:"kind"`
	// URL is the store's URL; for a replica behind a proxy, its host is
	// the proxy's.
	URL string `json:"url"`
	// Path and BusyTimeout are SQLite's (from the URL).
	Path string `json:"path,omitempty"`
	// Scratch is the run's table (SQLite, PostgreSQL) or namespace (Redis).
	Scratch string `json:"scratch"`
}

// closingStore is what every backend's *Store is.
type closingStore interface {
	store.Store
	Close() error
}

// parseBackend picks the store kind from the URL's scheme.
func parseBackend(rawURL, scratch string) (backend, error) {
	b := backend{URL: rawURL, Scratch: scratch}
	scheme, _, _ := strings.Cut(rawURL, ":")
	switch strings.ToLower(scheme) {
	case "sqlite":
		path, _, err := sqlite.ParseURL(rawURL)
		if err != nil {
			return b, err
		}
		b.Kind, b.Path = kindSQLite, path
	case "postgres", "postgresql":
		b.Kind = kindPostgres
	case "redis", "rediss":
		b.Kind = kindRedis
	default:
		return b, fmt.Errorf("chaos: store %s: verify supports sqlite:, postgres:// and redis:// stores: %w",
			store.RedactURL(rawURL), store.ErrInvalidURL)
	}
	return b, nil
}

// networked reports whether replicas reach the store through a proxy.
func (b backend) networked() bool { return b.Kind != kindSQLite }

// open opens the store with the run's scratch table or namespace.
func (b backend) open(ctx context.Context) (closingStore, error) {
	switch b.Kind {
	case kindSQLite:
		_, opts, err := sqlite.ParseURL(b.URL)
		if err != nil {
			return nil, err
		}
		opts.Table = b.Scratch
		return sqlite.Open(ctx, b.Path, opts)
	case kindPostgres:
		return postgres.Open(ctx, b.URL, postgres.Options{Table: b.Scratch})
	case kindRedis:
		return redis.Open(ctx, b.URL, redis.Options{Namespace: b.Scratch})
	}
	return nil, fmt.Errorf("chaos: unknown store kind %q", b.Kind)
}

// upstream is the host:port a proxy forwards to.
func (b backend) upstream() (string, error) {
	u, err := url.Parse(b.URL)
	if err != nil {
		return "", fmt.Errorf("chaos: %s: %w", store.RedactURL(b.URL), store.ErrInvalidURL)
	}
	if u.Query().Has("host") || u.Host == "" || strings.Contains(u.Host, ",") {
		return "", fmt.Errorf("chaos: %s: the proxy needs one TCP host in the URL (no unix socket, no host list)",
			store.RedactURL(b.URL))
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		port := "5432"
		if b.Kind == kindRedis {
			port = "6379"
		}
		host = net.JoinHostPort(strings.Trim(host, "[]"), port)
	}
	return host, nil
}

// via returns b with its URL pointing at a proxy listening on addr.
func (b backend) via(addr string) backend {
	u, err := url.Parse(b.URL)
	if err != nil {
		return b
	}
	u.Host = addr
	b.URL = u.String()
	return b
}

// cleanup drops the run's scratch table or namespace. The SQLite file
// itself belongs to the caller (or to the history directory).
func (b backend) cleanup(ctx context.Context) error {
	switch b.Kind {
	case kindSQLite:
		db, err := sql.Open("sqlite", "file:"+b.Path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+b.Scratch)
		return err
	case kindPostgres:
		return dropPostgres(ctx, b.URL, b.Scratch)
	case kindRedis:
		return dropRedisNamespace(ctx, b.URL, b.Scratch)
	}
	return nil
}

func dropPostgres(ctx context.Context, rawURL string, tables ...string) error {
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		return fmt.Errorf("chaos: %s: %w", store.RedactURL(rawURL), store.RedactError(err, urlPassword(rawURL)))
	}
	defer pool.Close()
	var errs []error
	for _, t := range tables {
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

func dropRedisNamespace(ctx context.Context, rawURL, ns string) error {
	o, err := goredis.ParseURL(rawURL)
	if err != nil {
		return fmt.Errorf("chaos: %s: %w", store.RedactURL(rawURL), store.ErrInvalidURL)
	}
	c := goredis.NewClient(o)
	defer c.Close()
	var keys []string
	iter := c.Scan(ctx, 0, "{"+ns+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return c.Del(ctx, keys...).Err()
}

// urlPassword is the password in a URL, for store.RedactError.
func urlPassword(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}
