package mysql

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/tenure-dev/tenure/store"
)

// ParseURL reads a mysql:// URL as [Open] does, for a caller that needs a
// handle of its own on the same database (a fence table next to the
// leases, a tool that drops a scratch table): the driver's configuration —
// the password set in it apart from the URL, and Open's defaults
// (interpolateParams, session time_zone '+00:00') unless the URL sets
// them — and Options with the URL's ?table=. Pass the configuration to
// mysqldrv.NewConnector and sql.OpenDB. Errors wrap store.ErrInvalidURL and
// never show the password; scrub a driver's errors with store.URLSecrets.
func ParseURL(rawURL string) (*mysqldrv.Config, Options, error) {
	cfg, table, _, _, err := parseURL(rawURL)
	if err != nil {
		return nil, Options{}, err
	}
	return cfg, Options{Table: table}, nil
}

// parseURL turns a mysql:// URL into the driver's configuration and the
// ?table= parameter. shown is the URL with its password hidden, for error
// messages; secrets are the strings to scrub from driver errors.
func parseURL(raw string) (cfg *mysqldrv.Config, table, shown string, secrets []string, err error) {
	secrets = store.URLSecrets(raw)
	invalid := func(format string, args ...any) error {
		detail := store.RedactString(fmt.Sprintf(format, args...), secrets...)
		return fmt.Errorf("mysql: %s: %s: %w", shown, detail, store.ErrInvalidURL)
	}
	if !strings.Contains(raw, "://") {
		// Where the password sits in such a string is anyone's guess (it
		// may be a go-sql-driver DSN, user:password@tcp(host)/db), so none
		// of it is shown.
		shown = "<not a URL>"
		return nil, "", "", nil, invalid("want mysql://user:password@host:port/database")
	}
	shown = store.RedactURL(raw)
	// The password is read once, by store's rules, and set in the driver's
	// configuration: the rest of the URL is parsed without it.
	rest, password, err := store.SplitURLPassword(raw)
	if err != nil {
		return nil, "", "", nil, fmt.Errorf("mysql: %s: %w", shown, err)
	}
	u, err := url.Parse(rest)
	if err != nil || u.Opaque != "" {
		var ue *url.Error
		if errors.As(err, &ue) {
			// Its message without the URL it quotes.
			return nil, "", "", nil, invalid("%v", ue.Err)
		}
		return nil, "", "", nil, invalid("want mysql://user:password@host:port/database")
	}
	if u.Scheme != "mysql" {
		return nil, "", "", nil, invalid("scheme must be mysql://")
	}
	q := u.Query()
	table, err = single(q, "table")
	if err != nil {
		return nil, "", "", nil, invalid("%v", err)
	}
	if table != "" {
		if err := store.ValidateName("table", table); err != nil {
			return nil, "", "", nil, fmt.Errorf("mysql: %s: %w: %w", shown, err, store.ErrInvalidURL)
		}
	}
	socket, err := single(q, "socket")
	if err != nil {
		return nil, "", "", nil, invalid("%v", err)
	}
	q.Del("table")
	q.Del("socket")
	if err := checkParams(q); err != nil {
		return nil, "", "", nil, invalid("%v", err)
	}

	database := strings.TrimPrefix(u.Path, "/")
	switch {
	case database == "":
		return nil, "", "", nil, invalid("no database: add /name after the host")
	case strings.Contains(database, "/"):
		return nil, "", "", nil, invalid("database name %q has a slash", database)
	}

	// The driver parses the parameters (rejecting bad values) from a DSN
	// with nothing else in it; the other fields are set directly, so no
	// character of a password or database name needs DSN escaping.
	cfg, err = mysqldrv.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, "", "", nil, invalid("%v", err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
	}
	cfg.Passwd = password
	cfg.DBName = database
	switch {
	case socket != "":
		if u.Host != "" {
			return nil, "", "", nil, invalid("both a host and ?socket=")
		}
		cfg.Net, cfg.Addr = "unix", socket
	case u.Hostname() == "":
		return nil, "", "", nil, invalid("no host (or ?socket=/path)")
	default:
		port := u.Port()
		if port == "" {
			port = "3306"
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, "", "", nil, invalid("port %q is out of range", port)
		}
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(u.Hostname(), port)
	}
	if !q.Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	if !q.Has("time_zone") {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
	}
	return cfg, table, shown, secrets, nil
}

// single returns the one value of q[name], or "" without it.
func single(q url.Values, name string) (string, error) {
	switch vs := q[name]; len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	default:
		return "", fmt.Errorf("?%s= given %d times", name, len(vs))
	}
}
