package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/watchset"
)

// DefaultNamespace is the namespace used when Options.Namespace is empty.
const DefaultNamespace = "tenure"

// Options configures a Store. The zero value means defaults.
type Options struct {
	// Namespace separates independent sets of leases on one Redis. It becomes
	// the hash tag of every key ("{tenure}:leases"), so all of a namespace's
	// keys live in one Cluster slot. Default "tenure"; it must match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$.
	Namespace string
}

// Store is a lease store on Redis. It is safe for concurrent use.
type Store struct {
	client     goredis.UniversalClient
	ownsClient bool

	namespace string
	keys      []string // {ns}:leases, {ns}:keys — passed to every script
	channel   string   // {ns}:events
	listPage  int      // records per List script call; tests lower it

	// seen is set once the acquisition script has answered: the namespace
	// existed then, so finding it empty later means it lost its data
	// (acquireScript).
	seen atomic.Bool

	// watches is the closed state and every running Watch, which Close
	// ends.
	watches watchset.Set
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
	_ store.Revoker = (*Store)(nil)
)

// Open connects to the single Redis server named by a redis:// or rediss://
// URL (redis://[user:password@]host:port/db?dial_timeout=…, as accepted by
// go-redis ParseURL), checks that it answers and returns a Store that owns
// the connection pool. Use [New] for Sentinel or Cluster.
//
// The password never appears in an error.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	shown := store.RedactURL(rawURL)
	// The password is read once, by store's rules, and handed to go-redis
	// apart from the URL, which it parses without it.
	rest, password, err := store.SplitURLPassword(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w", shown, err)
	}
	u, err := url.Parse(rest)
	if err != nil {
		// url.Parse's own error repeats the whole URL.
		return nil, fmt.Errorf("redis: cannot parse %s: %w", shown, store.ErrInvalidURL)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("redis: %s: scheme must be redis or rediss: %w", shown, store.ErrInvalidURL)
	}
	secrets := store.URLSecrets(rawURL)
	o, err := goredis.ParseURL(rest)
	if err != nil {
		return nil, fmt.Errorf("redis: %s: %w: %w", shown, store.ErrInvalidURL, store.RedactError(err, secrets...))
	}
	if password != "" {
		o.Password = password
	}
	// Store calls must end at their context deadline: the engine's
	// fail-closed timing bounds every call, and go-redis ignores deadlines
	// unless told otherwise.
	o.ContextTimeoutEnabled = true
	client := goredis.NewClient(o)
	s, err := newStore(client, opts, true)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: connect to %s: %w", shown, store.RedactError(denied(err), secrets...))
	}
	return s, nil
}

// New returns a Store on an existing client: a single node, a Sentinel
// failover client or a Cluster client. Close does not close client.
//
// The client must honour context deadlines (ContextTimeoutEnabled: true),
// because Tenure bounds every store call with one; New rejects the go-redis
// clients it can inspect that do not.
func New(client goredis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: nil client")
	}
	if !honoursDeadlines(client) {
		return nil, errors.New("redis: the client ignores context deadlines; " +
			"set ContextTimeoutEnabled: true in its options so a stalled Redis cannot hold a renewal past its deadline")
	}
	return newStore(client, opts, false)
}

func honoursDeadlines(c goredis.UniversalClient) bool {
	switch c := c.(type) {
	case *goredis.Client:
		return c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		return c.Options().ContextTimeoutEnabled
	default:
		return true // cannot tell; trust the caller
	}
}

func newStore(client goredis.UniversalClient, opts Options, owns bool) (*Store, error) {
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if err := store.ValidateName("redis: namespace", ns); err != nil {
		return nil, err
	}
	tag := "{" + ns + "}"
	return &Store{
		client:     client,
		ownsClient: owns,
		namespace:  ns,
		keys:       []string{tag + ":leases", tag + ":keys"},
		channel:    tag + ":events",
		listPage:   defaultListPage,
	}, nil
}

// Namespace returns the namespace the store's keys live in.
func (s *Store) Namespace() string { return s.namespace }

// Close ends every watcher and, when the Store came from [Open], closes the
// connection pool. Calls after Close fail with store.ErrClosed.
func (s *Store) Close() error {
	if !s.watches.Close() {
		return nil
	}
	if s.ownsClient {
		if err := s.client.Close(); err != nil {
			return fmt.Errorf("redis: close: %w", err)
		}
	}
	return nil
}

func (s *Store) isClosed() bool { return s.watches.Closed() }
