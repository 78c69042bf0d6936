package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
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
	keys      []string // {ns}:leases, :keys, :sessions — passed to every script
	channel   string   // {ns}:events
	listPage  int      // records per List script call; tests lower it

	// seen is set once the acquisition script has answered: the namespace
	// existed then, so finding it empty later means it lost its data
	// (acquireScript).
	seen atomic.Bool

	// book is what the Store knows of its owners' sessions (session.go);
	// fullAt is when each session was last opened or learned whole
	// (fullRenewalEvery).
	book   sessionbook.Book
	fullMu sync.Mutex
	fullAt map[sessionKey]time.Time

	// watches is the closed state and every running Watch, which Close
	// ends.
	watches watchset.Set
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
	_ store.Revoker = (*Store)(nil)
)

// Open connects to the Redis server named by a redis:// or rediss:// URL,
// checks that it answers and returns a Store that owns the connection
// pool. Use [New] for Cluster or a client configured in code.
//
// A single server: redis://[user:password@]host:port/db?dial_timeout=…,
// as go-redis ParseURL reads it.
//
// Sentinel, when the URL names a master_name: the host is a Sentinel, and
// addr= adds more of them, as go-redis ParseFailoverURL reads it:
//
//	redis://[user:password@]sentinel1:26379/0?master_name=mymaster&addr=sentinel2:26379&addr=sentinel3:26379
//
// The store follows the master the Sentinels name across failovers. One
// rule differs from ParseFailoverURL, so that a password means the same in
// every Tenure URL: the user and password before the '@' are the Redis
// servers' (the master's and its replicas'); the Sentinels' own, if they
// require one, go in sentinel_username= and sentinel_password=.
//
// The password never appears in an error.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	client, err := NewClient(rawURL)
	if err != nil {
		return nil, err
	}
	s, err := newStore(client, opts, true)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: connect to %s: %w", store.RedactURL(rawURL), store.RedactError(denied(err), store.URLSecrets(rawURL)...))
	}
	return s, nil
}

// NewClient returns the go-redis client Open would use for rawURL (see
// Open for the URL), without connecting: a tool that needs the same
// server as a Store (to clean up a namespace, say) reads the URL by the
// same rules. The caller closes it.
func NewClient(rawURL string) (*goredis.Client, error) {
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
	invalid := func(err error) error {
		return fmt.Errorf("redis: %s: %w: %w", shown, store.ErrInvalidURL, store.RedactError(err, store.URLSecrets(rawURL)...))
	}
	if IsSentinelURL(rawURL) {
		o, err := sentinelOptions(u, password)
		if err != nil {
			return nil, invalid(err)
		}
		return goredis.NewFailoverClient(o), nil
	}
	o, err := goredis.ParseURL(rest)
	if err != nil {
		return nil, invalid(err)
	}
	if password != "" {
		o.Password = password
	}
	// Store calls must end at their context deadline: the engine's
	// fail-closed timing bounds every call, and go-redis ignores deadlines
	// unless told otherwise.
	o.ContextTimeoutEnabled = true
	return goredis.NewClient(o), nil
}

// IsSentinelURL reports whether rawURL names Sentinels (master_name=)
// rather than a Redis server.
func IsSentinelURL(rawURL string) bool {
	_, query, _ := strings.Cut(rawURL, "?")
	q, _ := url.ParseQuery(query)
	return q.Has("master_name")
}

// sentinelOptions reads a Sentinel URL (u, its password taken out into
// password) by Open's rules.
func sentinelOptions(u *url.URL, password string) (*goredis.FailoverOptions, error) {
	q := u.Query()
	for _, name := range []string{"username", "password"} {
		if q.Has(name) {
			return nil, fmt.Errorf("%s= is not read in a Tenure URL: put the Redis servers' user and password before the '@', "+
				"and the Sentinels' in sentinel_username= and sentinel_password=", name)
		}
	}
	for _, name := range []string{"replica_only", "route_by_latency", "route_randomly"} {
		if q.Has(name) {
			return nil, fmt.Errorf("%s= sends calls to replicas, which cannot take Tenure's writes", name)
		}
	}
	if q.Get("master_name") == "" {
		return nil, errors.New("master_name= is empty: name the master the Sentinels monitor")
	}
	sentinelUser, sentinelPassword := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	bare := *u
	bare.User, bare.RawQuery = nil, q.Encode()
	o, err := goredis.ParseFailoverURL(bare.String())
	if err != nil {
		return nil, err
	}
	if u.User != nil {
		o.Username = u.User.Username()
	}
	o.Password = password
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	o.ContextTimeoutEnabled = true // as for one server, see Open
	return o, nil
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
		keys:       []string{tag + ":leases", tag + ":keys", tag + ":sessions"},
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
