package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	neturl "net/url"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/etcd"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// backend is one kind of real store.
type backend struct {
	name string
	// site makes a fresh, empty set of leases for one test (a table, a
	// file, a namespace), removed when the test ends, and returns a
	// function that opens one more Store on it. Each replica opens its
	// own, with its own connections, as separate processes would.
	site func(t testing.TB) (open func(t testing.TB) store.Store)
}

var backends = []backend{
	{"postgres", postgresSite},
	{"sqlite", sqliteSite},
	{"redis", redisSite},
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// urlPassword is the password in a server URL, to be cut out of errors.
func urlPassword(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

func setupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

func postgresSite(t testing.TB) func(testing.TB) store.Store {
	t.Helper()
	url := testenv.Postgres.URL(t)
	table := "tenure_e2e_" + randomHex(6)
	// Registered first, so it runs after every Store on the table closed.
	t.Cleanup(func() {
		ctx, cancel := setupCtx()
		defer cancel()
		// The store drops its session table and trigger function too.
		s, err := postgres.Open(ctx, url, postgres.Options{Table: table})
		if err == nil {
			err = errors.Join(s.Drop(ctx), s.Close())
		}
		if err != nil {
			t.Errorf("drop table %s: %v", table, store.RedactError(err, urlPassword(url)))
		}
	})
	return func(t testing.TB) store.Store {
		t.Helper()
		ctx, cancel := setupCtx()
		defer cancel()
		s, err := postgres.Open(ctx, url, postgres.Options{Table: table})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		// Create the table now, so the first acquisition of a timed run
		// does not pay for it.
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

func sqliteSite(t testing.TB) func(testing.TB) store.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.db")
	return func(t testing.TB) store.Store {
		t.Helper()
		return openSQLite(t, path, sqlite.Options{})
	}
}

func openSQLite(t testing.TB, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	ctx, cancel := setupCtx()
	defer cancel()
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("sqlite close: %v", err)
		}
	})
	return s
}

func redisSite(t testing.TB) func(testing.TB) store.Store {
	t.Helper()
	url := testenv.Redis.URL(t)
	ns := "e2e_" + randomHex(6)
	t.Cleanup(func() {
		o, err := goredis.ParseURL(url)
		if err != nil {
			t.Errorf("redis URL %s: %v", store.RedactURL(url), store.RedactError(err, urlPassword(url)))
			return
		}
		c := goredis.NewClient(o)
		defer c.Close()
		ctx, cancel := setupCtx()
		defer cancel()
		// The namespace's layout, from store/redis's documentation.
		tag := "{" + ns + "}"
		if err := c.Del(ctx, tag+":leases", tag+":keys", tag+":sessions").Err(); err != nil {
			t.Errorf("drop namespace %s: %v", ns, err)
		}
	})
	return func(t testing.TB) store.Store {
		t.Helper()
		ctx, cancel := setupCtx()
		defer cancel()
		s, err := redis.Open(ctx, url, redis.Options{Namespace: ns})
		if err != nil {
			testenv.Unavailable(t, "Redis: "+err.Error())
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// etcdBackend is measured by the benchmarks; the e2e tests run on the
// backends above.
var etcdBackend = backend{"etcd", etcdSite}

func etcdSite(t testing.TB) func(testing.TB) store.Store {
	t.Helper()
	url := testenv.Etcd.URL(t)
	prefix := "e2e_" + randomHex(6)
	t.Cleanup(func() {
		ctx, cancel := setupCtx()
		defer cancel()
		cfg, err := etcd.ClientConfig(url)
		var c *clientv3.Client
		if err == nil {
			cfg.Logger = zap.NewNop()
			c, err = clientv3.New(cfg)
		}
		if err != nil {
			t.Errorf("drop namespace %s: %v", prefix, err)
			return
		}
		defer c.Close()
		// The namespace's layout, from store/etcd's documentation.
		if _, err := c.Delete(ctx, "/"+prefix+"/", clientv3.WithPrefix()); err != nil {
			t.Errorf("drop namespace %s: %v", prefix, err)
		}
	})
	return func(t testing.TB) store.Store {
		t.Helper()
		ctx, cancel := setupCtx()
		defer cancel()
		s, err := etcd.Open(ctx, url, etcd.Options{Prefix: prefix})
		if err != nil {
			t.Fatalf("etcd.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}
