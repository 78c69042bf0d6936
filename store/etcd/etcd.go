package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-dev/tenure/store"
)

// DefaultPrefix is the namespace used when Options.Prefix is empty.
const DefaultPrefix = "tenure"

// DefaultMaxTxnOps is etcd's default --max-txn-ops.
const DefaultMaxTxnOps = 128

// defaultDialTimeout bounds Open's first contact with the cluster when the
// URL sets no dial_timeout.
const defaultDialTimeout = 5 * time.Second

// Options configures a Store. The zero value means defaults.
type Options struct {
	// Prefix separates independent sets of leases on one cluster: every
	// etcd key of the store starts with "/<Prefix>/leases/". Default
	// "tenure"; it must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$.
	Prefix string

	// MaxTxnOps is the cluster's --max-txn-ops. Batches are split into
	// transactions that fit it. Zero means DefaultMaxTxnOps (etcd's
	// default); raise it only together with the servers' setting.
	MaxTxnOps int
}

// Store is a lease store on etcd. It is safe for concurrent use.
type Store struct {
	client     *clientv3.Client
	ownsClient bool

	prefix string
	root   string // "/<prefix>/leases/"
	// chunk is how many keys one transaction reads or writes: each key is
	// one operation at the top level and at most three inside its nested
	// transaction, and etcd checks both levels against --max-txn-ops.
	readChunk, writeChunk int

	// minTTL is the shortest lease TTL, in seconds, the server granted
	// when asked for less (its floor is 1.5 election timeouts).
	minTTL atomic.Int64

	// batches remembers, per owner, the leases its last renewal attached
	// its terms to (see renew.go).
	batchMu sync.Mutex
	batches map[string]*batch

	// closed is read on every call without a lock; mu orders it with the
	// registration of watchers, so Close cancels and waits for all of them.
	closed       atomic.Bool
	mu           sync.Mutex
	nextWatch    int
	watchCancels map[int]context.CancelFunc
	watchers     sync.WaitGroup
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
	_ store.Revoker = (*Store)(nil)
)

// Open connects to the etcd cluster named by rawURL, checks that it answers
// and returns a Store that owns the client. The URL forms are
//
//	etcd://[user:password@]host[:port][,host[:port]…][?dial_timeout=5s]
//	etcd+https://[user:password@]host[:port][,…][?ca_file=…&cert_file=…&key_file=…]
//
// The port defaults to 2379. etcd+https verifies the servers against the
// system roots, or against ca_file; cert_file and key_file present a client
// certificate. dial_timeout (default 5s) bounds the first contact, so Open
// against an address where nothing answers fails within it.
//
// The password never appears in an error.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	shown := store.RedactURL(rawURL)
	cfg.Logger = zap.NewNop() // Tenure logs through slog; the client's warnings would go to stderr
	// A dead connection must surface as an error, not a silent hang of a
	// watch; etcd refuses pings more often than every 5s by default.
	cfg.DialKeepAliveTime = 10 * time.Second
	cfg.DialKeepAliveTimeout = 5 * time.Second

	// Validate the options before dialling, so a bad prefix is reported
	// as such even when the cluster is down.
	s, err := newStore(nil, opts, true)
	if err != nil {
		return nil, err
	}
	dialCtx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: connect to %s: %w", shown, store.RedactError(err, cfg.Password))
	}
	s.client = client
	// clientv3.New dials lazily (unless a password makes it authenticate
	// first): a read proves the cluster answers and has a leader.
	if _, err := client.Get(dialCtx, s.root, clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
		_ = client.Close()
		if dialCtx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v: %w", cfg.DialTimeout, err)
		}
		return nil, fmt.Errorf("etcd: connect to %s: %w", shown, store.RedactError(err, cfg.Password))
	}
	return s, nil
}

// New returns a Store on an existing client. Close does not close client.
func New(client *clientv3.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("etcd: nil client")
	}
	return newStore(client, opts, false)
}

func newStore(client *clientv3.Client, opts Options, owns bool) (*Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := store.ValidateName("etcd: prefix", prefix); err != nil {
		return nil, err
	}
	maxOps := opts.MaxTxnOps
	if maxOps == 0 {
		maxOps = DefaultMaxTxnOps
	}
	if maxOps < 8 {
		return nil, fmt.Errorf("etcd: MaxTxnOps %d is below 8, too few to batch anything", maxOps)
	}
	s := &Store{
		client:       client,
		ownsClient:   owns,
		prefix:       prefix,
		root:         "/" + prefix + "/leases/",
		readChunk:    maxOps,
		writeChunk:   maxOps - maxNestedOps,
		batches:      map[string]*batch{},
		watchCancels: map[int]context.CancelFunc{},
	}
	s.minTTL.Store(1)
	return s, nil
}

// Prefix returns the namespace the store's keys live in.
func (s *Store) Prefix() string { return s.prefix }

// Close ends every watcher and, when the Store came from [Open], closes the
// client. Calls after Close fail with store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	already := s.closed.Swap(true)
	for _, cancel := range s.watchCancels {
		cancel()
	}
	s.mu.Unlock()
	if already {
		return nil
	}
	s.watchers.Wait()
	if s.ownsClient && s.client != nil {
		if err := s.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("etcd: close: %w", err)
		}
	}
	return nil
}

func (s *Store) isClosed() bool { return s.closed.Load() }

// parseURL turns a store URL into a client configuration. Every error
// wraps store.ErrInvalidURL and shows the URL only redacted.
func parseURL(rawURL string) (clientv3.Config, error) {
	shown := store.RedactURL(rawURL)
	bad := func(format string, args ...any) (clientv3.Config, error) {
		return clientv3.Config{}, fmt.Errorf("etcd: %s: %s: %w", shown, fmt.Sprintf(format, args...), store.ErrInvalidURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's own error repeats the whole URL, password included.
		return bad("cannot parse")
	}
	var scheme string
	switch u.Scheme {
	case "etcd":
		scheme = "http"
	case "etcd+https":
		scheme = "https"
	default:
		return bad("scheme must be etcd or etcd+https")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no host: want etcd://host:2379[,host2:2379]")
	}
	if u.Path != "" && u.Path != "/" {
		return bad("unexpected path %q: the namespace is Options.Prefix", u.Path)
	}
	if u.Fragment != "" {
		return bad("unexpected fragment")
	}
	cfg := clientv3.Config{DialTimeout: defaultDialTimeout}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" || cfg.Password == "" {
			return bad("a user needs a password and a password needs a user")
		}
	}
	for _, hp := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			// No port: the whole part is the host (brackets for IPv6).
			host, port = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), "2379"
		}
		if host == "" || strings.ContainsAny(host, "/@[]") || !validPort(port) {
			return bad("bad endpoint %q: want host or host:port", hp)
		}
		cfg.Endpoints = append(cfg.Endpoints, scheme+"://"+net.JoinHostPort(host, port))
	}

	q := u.Query()
	var caFile, certFile, keyFile string
	for k, vs := range q {
		if len(vs) != 1 {
			return bad("parameter %s given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("dial_timeout %q is not a positive duration", v)
			}
			cfg.DialTimeout = d
		case "ca_file":
			caFile = v
		case "cert_file":
			certFile = v
		case "key_file":
			keyFile = v
		default:
			return bad("unknown parameter %q (known: dial_timeout, ca_file, cert_file, key_file)", k)
		}
	}
	if scheme == "http" && (caFile != "" || certFile != "" || keyFile != "") {
		return bad("ca_file, cert_file and key_file need the etcd+https scheme")
	}
	if (certFile == "") != (keyFile == "") {
		return bad("cert_file and key_file go together")
	}
	if scheme == "https" {
		tc, err := tlsConfig(caFile, certFile, keyFile)
		if err != nil {
			return bad("%v", err)
		}
		cfg.TLS = tc
	}
	return cfg, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for _, r := range p {
		if r < '0' || r > '9' {
			return false
		}
		n = n*10 + int(r-'0')
	}
	return n > 0 && n < 65536
}

// tlsConfig builds the client's TLS settings: the system roots unless a CA
// file is given, and a client certificate when one is.
func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// wrap adds the operation to an error and maps a closed client to
// store.ErrClosed.
func (s *Store) wrap(op string, err error) error {
	if s.isClosed() && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("etcd: %s: %w", op, errors.Join(store.ErrClosed, err))
	}
	return fmt.Errorf("etcd: %s: %w", op, err)
}
