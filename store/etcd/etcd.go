package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-dev/tenure/internal/engine/clock"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/watchset"
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

	// sessions holds the lease each owner's terms of one TTL and grace
	// are bound to (see session.go).
	sessMu   sync.Mutex
	sessions map[sessionID]*session

	// hints are released records this store's watches saw (hint.go).
	hintMu sync.Mutex
	hints  map[string]hint

	// watches is the closed state and every running Watch, which Close
	// ends.
	watches watchset.Set

	// now reads the clock a claim is dated on (dated.go): one that counts
	// the time the host spends suspended, as the server's lease clock
	// does, and as the engine's deadlines do. A test may stage a suspend.
	now func() time.Time
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
	cfg, shown, err := clientConfig(rawURL)
	if err != nil {
		return nil, err
	}
	// clientv3.New authenticates (when given a password) within
	// DialTimeout, not within ctx: shorten it to ctx's deadline.
	if d, ok := ctx.Deadline(); ok {
		cfg.DialTimeout = max(min(cfg.DialTimeout, time.Until(d)), time.Millisecond)
	}

	// Validate the options before dialling, so a bad prefix is reported
	// as such even when the cluster is down.
	s, err := newStore(nil, opts, true)
	if err != nil {
		return nil, err
	}
	dialCtx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	client, err := clientv3.New(cfg)
	if err == nil {
		// clientv3.New dials lazily (unless it had to log in): a read
		// proves the cluster answers and has a leader.
		_, err = client.Get(dialCtx, s.root, clientv3.WithCountOnly(), clientv3.WithLimit(1))
		if err != nil {
			_ = client.Close()
		}
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v: %w", cfg.DialTimeout, err)
		}
		return nil, fmt.Errorf("etcd: connect to %s: %w", shown, store.RedactError(denied(err), cfg.Password))
	}
	s.client = client
	return s, nil
}

// ClientConfig returns the client configuration [Open] uses for rawURL —
// endpoints, user and password, TLS, dial timeout, keep-alives, no client
// logging — for a caller that builds its own client (with a dialer of its
// own, say) and hands it to [New]. Errors wrap store.ErrInvalidURL and
// never show the password.
func ClientConfig(rawURL string) (clientv3.Config, error) {
	cfg, _, err := clientConfig(rawURL)
	return cfg, err
}

func clientConfig(rawURL string) (cfg clientv3.Config, shown string, err error) {
	cfg, shown, err = parseURL(rawURL)
	if err != nil {
		return cfg, "", err
	}
	cfg.Logger = zap.NewNop() // Tenure logs through slog; the client's warnings would go to stderr
	// A dead connection must surface as an error, not a silent hang of a
	// watch; etcd refuses pings more often than every 5s by default.
	cfg.DialKeepAliveTime = 10 * time.Second
	cfg.DialKeepAliveTimeout = 5 * time.Second
	return cfg, shown, nil
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
		client:     client,
		ownsClient: owns,
		prefix:     prefix,
		root:       "/" + prefix + "/leases/",
		readChunk:  maxOps,
		writeChunk: maxOps - maxNestedOps,
		sessions:   map[sessionID]*session{},
		hints:      map[string]hint{},
		now:        clock.Now,
	}
	s.minTTL.Store(1)
	return s, nil
}

// Prefix returns the namespace the store's keys live in.
func (s *Store) Prefix() string { return s.prefix }

// Close ends every watcher and, when the Store came from [Open], closes the
// client. Calls after Close fail with store.ErrClosed.
func (s *Store) Close() error {
	if !s.watches.Close() {
		return nil
	}
	if s.ownsClient && s.client != nil {
		if err := s.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("etcd: close: %w", err)
		}
	}
	return nil
}

func (s *Store) isClosed() bool { return s.watches.Closed() }

// wrap adds the operation to an error and maps a closed client to
// store.ErrClosed.
func (s *Store) wrap(op string, err error) error {
	if s.isClosed() && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("etcd: %s: %w", op, errors.Join(store.ErrClosed, err))
	}
	return fmt.Errorf("etcd: %s: %w", op, denied(err))
}

// denied marks as store.ErrDenied the errors by which etcd refuses
// credentials or rights: permission denied (a role without the key
// range), authentication failed, an unknown or empty user.
func denied(err error) error {
	for _, e := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrUserNotFound, rpctypes.ErrUserEmpty} {
		if errors.Is(err, e) || errors.Is(rpctypes.Error(err), e) {
			return store.Denied(err)
		}
	}
	return err
}
