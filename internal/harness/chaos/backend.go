package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/etcd"
	"github.com/tenure-dev/tenure/store/mysql"
	"github.com/tenure-dev/tenure/store/redis"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// Store kinds the harness can test: every kind storeurl opens.
const (
	kindSQLite   = string(storeurl.SQLite)
	kindPostgres = string(storeurl.Postgres)
	kindMySQL    = string(storeurl.MySQL)
	kindRedis    = string(storeurl.Redis)
	kindEtcd     = string(storeurl.Etcd)
)

// backend says how to reach the store under test, with the scratch names
// of one run: a table (SQL), namespace (Redis) or prefix (etcd) of its
// own, so that a run never touches leases it did not create.
//
// Every connection is opened from URL by the store's own readers
// (storeurl, the backends' ParseURL and ClientConfig, the drivers' own
// parsers once the password is taken out), so that no URL is read two
// ways and no driver sees a password in a URL.
type backend struct {
	Kind string `json:"kind"`
	// URL is the store's URL as storeurl hands it to the backend (its
	// table, namespace or prefix parameter removed).
	URL string `json:"url"`
	// Path is SQLite's file (from the URL).
	Path string `json:"path,omitempty"`
	// Scratch is the run's table (SQLite, PostgreSQL, MySQL), namespace
	// (Redis) or prefix (etcd).
	Scratch string `json:"scratch"`
	// Via maps each of the store's endpoints (host:port) to the proxy
	// that stands in for it: a replica's connections go there and nowhere
	// else. Empty for the harness's own connections.
	Via map[string]string `json:"via,omitempty"`
}

// roundTrips is, per networked store, how many round trips in a row the
// slowest call a replica makes in steady state takes: a renewal, a List,
// an acquisition of a key a peer holds (see
// TestSlowStoreCountsEachStoresRoundTrips). A slow store delays each
// round trip by its share of the call's added time, so that a call that
// takes several still answers within the call timeout; a delay per round
// trip the size of the whole would time it out, which is a partial outage
// (the latency fault), not a slow store.
var roundTrips = map[string]int{
	kindPostgres: 1, // one statement, prepared on first use
	kindRedis:    1, // EVALSHA
	kindMySQL:    2, // a refused acquisition: the takeover, then a read of the holder
	kindEtcd:     2, // a renewal: the session's TimeToLive, then its keep-alive; a List: a read, then TimeToLive
}

// closingStore is what every backend's *Store is.
type closingStore interface {
	store.Store
	Close() error
}

// CheckStore reports whether Run can verify the store at rawURL: a URL
// storeurl reads, whose server proxies can stand in for — one TCP host for
// MySQL and Redis, one or several for PostgreSQL (a primary and its
// standbys; no unix socket), any list of endpoints for etcd. It connects to nothing. Errors wrap
// store.ErrInvalidURL (or store.ErrInvalidName) and never show a password.
func CheckStore(rawURL string) error {
	_, err := parseBackend(rawURL, "chaos_check")
	return err
}

// parseBackend reads the store URL with storeurl, which knows every kind.
func parseBackend(rawURL, scratch string) (backend, error) {
	spec, err := storeurl.Parse(rawURL)
	if err != nil {
		return backend{}, fmt.Errorf("chaos: %w", err)
	}
	b := backend{Kind: string(spec.Kind), URL: spec.URL, Scratch: scratch}
	if b.Kind == kindSQLite {
		if b.Path, _, err = sqlite.ParseURL(spec.URL); err != nil {
			return b, err
		}
	}
	if b.networked() {
		if _, err := b.endpoints(); err != nil {
			return b, err
		}
	}
	return b, nil
}

// networked reports whether replicas reach the store through proxies. A
// Redis Sentinel URL is not: the Sentinels hand the client the master's
// address at run time, which no proxy made beforehand stands in for, so
// its network faults are played in the replica, as for SQLite.
func (b backend) networked() bool {
	return b.Kind != kindSQLite && (b.Kind != kindRedis || !redis.IsSentinelURL(b.URL))
}

// secrets are every form of the URL's secrets, for store.RedactError.
func (b backend) secrets() []string { return store.URLSecrets(b.URL) }

// redact scrubs the URL's secrets from a driver's error.
func (b backend) redact(err error) error { return store.RedactError(err, b.secrets()...) }

// endpoints are the host:port pairs the store's client dials, as the
// store's own configuration reads the URL: one for the SQL stores and
// Redis, one per cluster member listed for etcd (whose client keeps a
// connection to each). A unix socket or a host list, which a proxy per
// replica cannot stand in for, is refused.
func (b backend) endpoints() ([]string, error) {
	bad := func(why string) error {
		return fmt.Errorf("chaos: %s: %s: %w", store.RedactURL(b.URL), why, store.ErrInvalidURL)
	}
	oneTCP := "verify needs one TCP host in the URL, which a proxy per replica stands in for (no unix socket, no host list but PostgreSQL's)"
	switch b.Kind {
	case kindPostgres:
		// Hosts in the URL's order (a primary and its standbys, say), each
		// once: pgx adds a fallback per host for each TLS mode it tries.
		cfg, err := b.pgConfig()
		if err != nil {
			return nil, err
		}
		c := cfg.ConnConfig
		var eps []string
		for _, h := range append([]*pgconn.FallbackConfig{{Host: c.Host, Port: c.Port}}, c.Fallbacks...) {
			if strings.HasPrefix(h.Host, "/") {
				return nil, bad("verify needs TCP hosts in the URL, which a proxy per replica stands in for (no unix socket)")
			}
			if ep := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port))); !slices.Contains(eps, ep) {
				eps = append(eps, ep)
			}
		}
		return eps, nil
	case kindMySQL:
		cfg, _, err := mysql.ParseURL(b.URL)
		if err != nil {
			return nil, err
		}
		if cfg.Net != "tcp" {
			return nil, bad(oneTCP)
		}
		return []string{cfg.Addr}, nil
	case kindRedis:
		o, err := b.redisOptions()
		if err != nil {
			return nil, err
		}
		if o.Network == "unix" {
			return nil, bad(oneTCP)
		}
		return []string{o.Addr}, nil
	case kindEtcd:
		cfg, err := etcd.ClientConfig(b.URL)
		if err != nil {
			return nil, err
		}
		var eps []string
		for _, ep := range cfg.Endpoints {
			_, hostPort, _ := strings.Cut(ep, "://")
			eps = append(eps, hostPort)
		}
		return eps, nil
	}
	return nil, fmt.Errorf("chaos: %s stores have no network endpoint", b.Kind)
}

// via returns b for a replica whose connections go through the proxies
// at proxies (one per endpoint, in endpoints' order). The SQL stores and
// Redis get the proxy's address in their URL, and the URL is read back to
// prove it names nothing else; etcd keeps its endpoints (so TLS still
// checks the servers' names) and dials them through the proxies (see
// openEtcd).
func (b backend) via(proxies []string) (backend, error) {
	eps, err := b.endpoints()
	if err != nil {
		return b, err
	}
	if len(eps) != len(proxies) {
		return b, fmt.Errorf("chaos: %d proxies for %d endpoints", len(proxies), len(eps))
	}
	b.Via = map[string]string{}
	for i, ep := range eps {
		b.Via[ep] = proxies[i]
	}
	if b.Kind == kindEtcd {
		return b, nil
	}
	if b.URL, err = withHost(b.URL, strings.Join(proxies, ",")); err != nil {
		return b, err
	}
	if got, err := b.endpoints(); err != nil || !slices.Equal(got, proxies) {
		return b, fmt.Errorf("chaos: the URL rewritten for proxies reaches %v, not only %v (%v)", got, proxies, err)
	}
	return b, nil
}

// withHost returns raw with its host:port replaced by addr (a list for
// PostgreSQL's several hosts). The password
// is taken out first and put back encoded, as storeurl does, so that one
// net/url would misread survives.
func withHost(raw, addr string) (string, error) {
	rest, password, err := store.SplitURLPassword(raw)
	if err != nil {
		return "", fmt.Errorf("chaos: %s: %w", store.RedactURL(raw), err)
	}
	u, err := url.Parse(rest)
	if err != nil {
		return "", fmt.Errorf("chaos: %s does not parse: %w", store.RedactURL(raw), store.ErrInvalidURL)
	}
	u.Host = addr
	if password != "" {
		u.User = url.UserPassword(u.User.Username(), password)
	}
	return u.String(), nil
}

// open opens the store with the run's scratch table, namespace or prefix,
// through the store's own Open (storeurl) but for an etcd replica, whose
// client needs a dialer of the harness's.
func (b backend) open(ctx context.Context) (closingStore, error) {
	switch b.Kind {
	case kindSQLite:
		_, opts, err := sqlite.ParseURL(b.URL)
		if err != nil {
			return nil, err
		}
		opts.Table = b.Scratch
		return sqlite.Open(ctx, b.Path, opts)
	case kindEtcd:
		if len(b.Via) > 0 {
			return b.openEtcd(ctx)
		}
	}
	spec, err := storeurl.Parse(b.URL)
	if err != nil {
		return nil, err
	}
	spec.Table, spec.Namespace, spec.Prefix = b.Scratch, b.Scratch, b.Scratch
	return storeurl.OpenSpec(ctx, spec)
}

// etcdViaProxies is an etcd store on a client the harness built; closing
// it closes the client too.
type etcdViaProxies struct {
	*etcd.Store
	client *clientv3.Client
}

func (s etcdViaProxies) Close() error {
	err := s.client.Close()
	if errors.Is(err, context.Canceled) { // how a client reports its own closing, as etcd.Store.Close knows
		err = nil
	}
	return errors.Join(s.Store.Close(), err)
}

// openEtcd opens an etcd store whose client dials each endpoint through
// its proxy and refuses any other address, should it learn one.
func (b backend) openEtcd(ctx context.Context) (closingStore, error) {
	client, err := b.etcdClient()
	if err != nil {
		return nil, err
	}
	s, err := etcd.New(client, etcd.Options{Prefix: b.Scratch})
	if err == nil {
		// As etcd.Open does: the client dials lazily, a read proves the
		// cluster answers and has a leader.
		_, err = client.Get(ctx, "/"+b.Scratch+"/", clientv3.WithCountOnly(), clientv3.WithLimit(1))
	}
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("chaos: etcd %s: %w", store.RedactURL(b.URL), b.redact(err))
	}
	return etcdViaProxies{Store: s, client: client}, nil
}

// etcdClient is a client of the etcd cluster, configured as etcd.Open
// configures its own; with Via, every connection goes through a proxy.
func (b backend) etcdClient() (*clientv3.Client, error) {
	cfg, err := etcd.ClientConfig(b.URL)
	if err != nil {
		return nil, err
	}
	if len(b.Via) > 0 {
		via := b.Via
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			px, ok := via[addr]
			if !ok {
				return nil, fmt.Errorf("chaos: no proxy stands in for %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", px)
		}))
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: etcd %s: %w", store.RedactURL(b.URL), b.redact(err))
	}
	return client, nil
}

// pgConfig is pgx's configuration of the URL, its password set apart from
// the URL as the PostgreSQL store sets it (pgx ends a password at its
// first '@').
func (b backend) pgConfig() (*pgxpool.Config, error) {
	rest, password, err := store.SplitURLPassword(b.URL)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", store.RedactURL(b.URL), err)
	}
	cfg, err := pgxpool.ParseConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w: %w", store.RedactURL(b.URL), b.redact(err), store.ErrInvalidURL)
	}
	if password != "" {
		cfg.ConnConfig.Password = password
	}
	return cfg, nil
}

// pgPool connects to the PostgreSQL database directly.
func (b backend) pgPool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := b.pgConfig()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", store.RedactURL(b.URL),
			store.RedactError(err, append(b.secrets(), cfg.ConnConfig.Password)...))
	}
	return pool, nil
}

// mysqlDB is a handle on the MySQL database, configured as the store's.
func (b backend) mysqlDB() (*sql.DB, error) {
	cfg, _, err := mysql.ParseURL(b.URL)
	if err != nil {
		return nil, err
	}
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", store.RedactURL(b.URL), b.redact(err))
	}
	return sql.OpenDB(conn), nil
}

func (b backend) redisOptions() (*goredis.Options, error) {
	c, err := redis.NewClient(b.URL)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer c.Close()
	return c.Options(), nil
}

// cleanup drops the run's scratch table, namespace or prefix. The SQLite
// file itself belongs to the caller (or to the history directory).
func (b backend) cleanup(ctx context.Context) error {
	var err error
	switch b.Kind {
	case kindSQLite, kindPostgres, kindMySQL:
		// The store drops what it keeps beside its table (sessions).
		err = b.dropStore(ctx)
	case kindRedis:
		err = b.dropRedisNamespace(ctx, b.Scratch)
	case kindEtcd:
		err = b.deleteEtcdPrefix(ctx, "/"+b.Scratch+"/")
	}
	return b.redact(err)
}

// dropStore opens the run's scratch store and drops it whole.
func (b backend) dropStore(ctx context.Context) error {
	st, err := b.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	d, ok := st.(interface{ Drop(context.Context) error })
	if !ok {
		return fmt.Errorf("chaos: a %s store cannot drop its table", b.Kind)
	}
	return d.Drop(ctx)
}

func (b backend) dropPostgres(ctx context.Context, tables ...string) error {
	pool, err := b.pgPool(ctx)
	if err != nil {
		return err
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

func (b backend) dropMySQL(ctx context.Context, tables ...string) error {
	db, err := b.mysqlDB()
	if err != nil {
		return err
	}
	defer db.Close()
	var errs []error
	for _, t := range tables {
		// Names were checked by store.ValidateName; the backticks allow a
		// reserved word, as the store's own SQL does.
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+t+"`"); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

func (b backend) dropRedisNamespace(ctx context.Context, ns string) error {
	c, err := redis.NewClient(b.URL)
	if err != nil {
		return err
	}
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

// deleteEtcdPrefix deletes every key under prefix. The etcd leases the
// store's keys were on expire by themselves within a TTL + grace.
func (b backend) deleteEtcdPrefix(ctx context.Context, prefix string) error {
	c, err := b.etcdClient()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Delete(ctx, prefix, clientv3.WithPrefix())
	return err
}
