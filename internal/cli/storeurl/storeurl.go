// Package storeurl opens the lease store a URL names, choosing the backend by
// the URL's scheme. It is the command-line tool's only way to a store: the
// backends are imported here, by name, rather than registered globally.
//
// Accepted forms:
//
//	sqlite:PATH, sqlite:/abs/path.db, sqlite:///abs/path.db   (?table=, ?busy_timeout=)
//	postgres://user:pass@host:5432/db, postgresql://…         (?table=, plus pgx's parameters)
//	mysql://user:pass@host:3306/db                            (?table=, ?socket=, plus the driver's parameters)
//	redis://[user:pass@]host:6379/0, rediss://…               (?namespace=, plus go-redis's)
//	redis://[user:pass@]sentinel:26379/0?master_name=M&addr=…  (Sentinel; see store/redis.Open)
//	etcd://[user:pass@]host:2379[,host2:2379], etcd+https://… (?prefix=, ?dial_timeout=, TLS files)
//
// An empty URL means an SQLite file in the user's state directory (see
// [DefaultPath]). No error of this package shows a password.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenure-dev/tenure/internal/typo"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/etcd"
	"github.com/tenure-dev/tenure/store/mysql"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// Supported lists the URL forms this build accepts, for error messages and help.
const Supported = "sqlite:PATH, postgres://, postgresql://, mysql://, redis://, rediss://, etcd://, etcd+https://"

// Store is an open lease store that must be closed. Its dynamic type is the
// backend's own (*sqlite.Store, …), so optional powers such as
// store.Revoker are found by type assertion as usual.
type Store interface {
	store.Store
	io.Closer
}

// Kind names a backend.
type Kind string

// The backends this package can open.
const (
	SQLite   Kind = "sqlite"
	Postgres Kind = "postgres"
	MySQL    Kind = "mysql"
	Redis    Kind = "redis"
	Etcd     Kind = "etcd"
)

// Spec is a parsed store URL: which backend, the URL to hand it (with this
// package's own parameters removed) and those parameters.
type Spec struct {
	Kind Kind
	// URL is what the backend's opener receives.
	URL string
	// Table (postgres, mysql), Namespace (redis) or Prefix (etcd), taken
	// out of the query so the driver never sees a parameter it does not
	// know.
	Table, Namespace, Prefix string
	// Shown is the URL fit for printing: password and secret parameters
	// replaced by xxxxx.
	Shown string
	// Public is the URL without its credentials — password and secret
	// parameters removed, not masked — so that it still names the same
	// store (table, namespace and prefix included) for a process that
	// brings credentials of its own (.pgpass, PGPASSWORD). Commands run by
	// tenure get it as TENURE_STORE.
	Public string
	// Secrets are every form of the URL's secrets, longest first, for
	// store.RedactString to scrub from messages that may quote them.
	Secrets []string
}

// Redact returns raw with every password replaced, for errors and logs.
func Redact(raw string) string { return store.RedactURL(raw) }

// DefaultPath is the SQLite file used when no store URL is given:
// $XDG_STATE_HOME/tenure/tenure.db when XDG_STATE_HOME is an absolute path
// (the XDG spec says to ignore a relative one), else
// ~/.local/state/tenure/tenure.db.
func DefaultPath() (string, error) {
	if dir := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "tenure", "tenure.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", fmt.Errorf("no store URL given and no home directory to keep the default SQLite file in (set --store or TENURE_STORE): %w", store.ErrInvalidURL)
	}
	return filepath.Join(home, ".local", "state", "tenure", "tenure.db"), nil
}

// DefaultURL is DefaultPath as a sqlite: URL.
func DefaultURL() (string, error) {
	path, err := DefaultPath()
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "sqlite", Path: path}).String(), nil
}

// Parse checks raw without connecting to anything. An empty raw means
// DefaultURL.
func Parse(raw string) (Spec, error) {
	if strings.TrimSpace(raw) == "" {
		def, err := DefaultURL()
		if err != nil {
			return Spec{}, err
		}
		raw = def
	}
	shown := Redact(raw)
	scheme, _, found := strings.Cut(raw, ":")
	if !found || scheme == "" || strings.ContainsAny(scheme, "/\\ ") {
		hint := ""
		if strings.HasSuffix(raw, ".db") || strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, ".") {
			hint = fmt.Sprintf("; for a file write sqlite:%s", shown)
		}
		return Spec{}, fmt.Errorf("store URL %s has no scheme (supported: %s)%s: %w", shown, Supported, hint, store.ErrInvalidURL)
	}
	public, err := store.URLWithoutSecrets(raw)
	if err != nil {
		return Spec{}, fmt.Errorf("store URL %s: %w", shown, err)
	}
	spec := Spec{URL: raw, Shown: shown, Public: public, Secrets: store.URLSecrets(raw)}
	switch strings.ToLower(scheme) {
	case "sqlite":
		spec.Kind = SQLite
		if _, _, err := sqlite.ParseURL(raw); err != nil {
			return Spec{}, err
		}
		return spec, nil
	case "postgres", "postgresql":
		spec.Kind = Postgres
		return takeParam(spec, "table", func(s *Spec, v string) { s.Table = v })
	case "mysql":
		spec.Kind = MySQL
		return takeParam(spec, "table", func(s *Spec, v string) { s.Table = v })
	case "redis", "rediss":
		spec.Kind = Redis
		return takeParam(spec, "namespace", func(s *Spec, v string) { s.Namespace = v })
	case "etcd", "etcd+https":
		spec.Kind = Etcd
		return takeEtcdPrefix(spec)
	}
	return Spec{}, fmt.Errorf("store URL %s: unknown scheme %q (supported: %s): %w",
		shown, Redact(scheme), Supported, store.ErrInvalidURL)
}

// takeParam moves query parameter name out of spec.URL into the field set
// sets, and validates it as a table or namespace name.
func takeParam(spec Spec, name string, set func(*Spec, string)) (Spec, error) {
	// net/url refuses some passwords that store's reading takes (a space,
	// a letter beyond ASCII), so the URL is parsed without its password,
	// which goes back in, encoded, if the URL is rebuilt.
	rest, password, err := store.SplitURLPassword(spec.URL)
	if err != nil {
		return Spec{}, fmt.Errorf("store URL %s: %w", spec.Shown, err)
	}
	u, err := url.Parse(rest)
	if err != nil {
		// url.Parse's message repeats the whole URL.
		return Spec{}, fmt.Errorf("store URL %s does not parse: %w", spec.Shown, store.ErrInvalidURL)
	}
	rawQuery, found, err := takeFromQuery(&spec, u.RawQuery, name, set)
	if err != nil || !found {
		return spec, err
	}
	u.RawQuery = rawQuery
	if password != "" {
		u.User = url.UserPassword(u.User.Username(), password)
	}
	spec.URL = u.String()
	return spec, nil
}

// takeEtcdPrefix is takeParam for ?prefix= of an etcd URL, which net/url
// cannot parse when it lists several endpoints: the query is cut out by
// hand, as store/etcd reads it (after the first '?', before any '#').
func takeEtcdPrefix(spec Spec) (Spec, error) {
	base, query, hasQuery := strings.Cut(spec.URL, "?")
	if !hasQuery {
		return spec, nil
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	rawQuery, found, err := takeFromQuery(&spec, query, "prefix", func(s *Spec, v string) { s.Prefix = v })
	if err != nil || !found {
		return spec, err
	}
	spec.URL = base
	if rawQuery != "" {
		spec.URL += "?" + rawQuery
	}
	if hasFragment {
		spec.URL += "#" + fragment // for store/etcd to refuse
	}
	return spec, nil
}

// takeFromQuery validates parameter name of rawQuery as a table or
// namespace name, hands it to set and returns the query without it. found
// is false, and nothing changes, when the parameter is absent.
func takeFromQuery(spec *Spec, rawQuery, name string, set func(*Spec, string)) (rest string, found bool, err error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", false, fmt.Errorf("store URL %s: bad query string: %w", spec.Shown, store.ErrInvalidURL)
	}
	// A misspelt ?table= would reach the driver, which passes unknown
	// parameters to the server (as a setting to apply), and the failure
	// would come from the server, or not at all while Tenure used its
	// default table. Catch it here.
	for k := range q {
		if k != name && typo.Nearest(k, []string{name}) != "" {
			return "", false, fmt.Errorf("store URL %s: unknown parameter %q: did you mean ?%s=: %w", spec.Shown, k, name, store.ErrInvalidURL)
		}
	}
	vals, ok := q[name]
	if !ok {
		return rawQuery, false, nil
	}
	if len(vals) != 1 {
		return "", false, fmt.Errorf("store URL %s: parameter %q given %d times: %w", spec.Shown, name, len(vals), store.ErrInvalidURL)
	}
	if err := store.ValidateName(name, vals[0]); err != nil {
		return "", false, fmt.Errorf("store URL %s: %w", spec.Shown, err)
	}
	set(spec, vals[0])
	return dropParam(rawQuery, name), true, nil
}

// dropParam returns rawQuery without the pairs of parameter name, leaving
// every other pair as written: re-encoding would turn %20 into +, which
// not every driver reads back as a space.
func dropParam(rawQuery, name string) string {
	var kept []string
	for _, pair := range strings.Split(rawQuery, "&") {
		k, _, _ := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); err == nil && key == name {
			continue
		}
		kept = append(kept, pair)
	}
	return strings.Join(kept, "&")
}

// Open parses raw and opens its store. Servers (all but SQLite) are
// contacted, so a wrong host or password fails here. Errors wrap store.ErrInvalidURL (or
// store.ErrInvalidName) when the URL itself is at fault; any other error
// means the store could not be reached or used.
func Open(ctx context.Context, raw string) (Store, error) {
	spec, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return OpenSpec(ctx, spec)
}

// OpenSpec opens a parsed URL.
func OpenSpec(ctx context.Context, spec Spec) (Store, error) { return open(ctx, spec, false) }

// OpenReadOnly opens a parsed URL's store, which must exist, to read it:
// nothing is created or migrated — no SQLite file, directory or table, no
// SQL table — and a store or table that does not exist fails with
// store.ErrNotFound. List works; writes fail with store.ErrReadOnly on
// SQLite, PostgreSQL and MySQL. Redis and etcd have nothing to create, and
// their List only reads.
func OpenReadOnly(ctx context.Context, spec Spec) (Store, error) { return open(ctx, spec, true) }

func open(ctx context.Context, spec Spec, readOnly bool) (Store, error) {
	switch spec.Kind {
	case SQLite:
		path, opts, err := sqlite.ParseURL(spec.URL)
		if err != nil {
			return nil, err
		}
		opts.ReadOnly = readOnly
		s, err := sqlite.Open(ctx, path, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	case Postgres:
		s, err := postgres.Open(ctx, spec.URL, postgres.Options{Table: spec.Table, ReadOnly: readOnly})
		if err != nil {
			return nil, err
		}
		return s, nil
	case MySQL:
		s, err := mysql.Open(ctx, spec.URL, mysql.Options{Table: spec.Table, ReadOnly: readOnly})
		if err != nil {
			return nil, err
		}
		return s, nil
	case Redis:
		s, err := redis.Open(ctx, spec.URL, redis.Options{Namespace: spec.Namespace})
		if err != nil {
			return nil, err
		}
		return s, nil
	case Etcd:
		s, err := etcd.Open(ctx, spec.URL, etcd.Options{Prefix: spec.Prefix})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("store URL %s: no backend for %q: %w", spec.Shown, spec.Kind, store.ErrInvalidURL)
}

// IsURLError reports whether err is the URL's fault (a usage error) rather
// than the store's.
func IsURLError(err error) bool {
	return errors.Is(err, store.ErrInvalidURL) || errors.Is(err, store.ErrInvalidName)
}
