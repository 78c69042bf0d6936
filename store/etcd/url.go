package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/store"
)

// parseURL turns a store URL into a client configuration and the URL as it
// may be shown (password replaced). Every error wraps store.ErrInvalidURL
// and never holds the password.
//
// The authority is split by hand: net/url rejects lists of hosts such as
// "h1:2379,h2" or "[::1]:2379,[::2]:2379".
func parseURL(raw string) (cfg clientv3.Config, shown string, err error) {
	shown = "<URL without scheme://>"
	if strings.Contains(raw, "://") {
		shown = store.RedactURL(raw)
	}
	bad := func(format string, args ...any) (clientv3.Config, string, error) {
		return clientv3.Config{}, "", fmt.Errorf("etcd: %s: %s: %w", shown, fmt.Sprintf(format, args...), store.ErrInvalidURL)
	}
	if strings.IndexFunc(raw, unicode.IsControl) >= 0 {
		return bad("control character")
	}
	schemeName, _, found := strings.Cut(raw, "://")
	var scheme string
	switch {
	case !found:
		return bad("want etcd://host:2379[,host2:2379]")
	case schemeName == "etcd":
		scheme = "http"
	case schemeName == "etcd+https":
		scheme = "https"
	default:
		return bad("scheme must be etcd or etcd+https")
	}
	// The password is read by store's rules (it runs to the last '@'); the
	// rest, user name included, is read here without it.
	stripped, password, err := store.SplitURLPassword(raw)
	if err != nil {
		return clientv3.Config{}, "", fmt.Errorf("etcd: %s: %w", shown, err)
	}
	rest := strings.TrimPrefix(stripped, schemeName+"://")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	hosts := authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		user, err := url.Parse("etcd://" + authority[:i+1] + "h")
		if err != nil || user.User == nil {
			return bad("cannot parse the user name")
		}
		cfg.Username = user.User.Username()
		hosts = authority[i+1:]
	}
	cfg.Password = password
	if (cfg.Username == "") != (cfg.Password == "") {
		return bad("a user needs a password and a password needs a user")
	}
	u, err := url.Parse("etcd://h" + tail)
	if err != nil {
		return bad("cannot parse the path or query")
	}
	if u.Path != "" && u.Path != "/" {
		return bad("unexpected path %q: the namespace is Options.Prefix", u.Path)
	}
	if u.Fragment != "" {
		return bad("unexpected fragment")
	}
	if hosts == "" {
		return bad("no host: want etcd://host:2379[,host2:2379]")
	}
	for _, hp := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			// No port: the whole part is the host (in brackets for IPv6).
			host, port = hp, "2379"
			if strings.HasPrefix(hp, "[") && strings.HasSuffix(hp, "]") {
				host = hp[1 : len(hp)-1]
			}
		}
		if host == "" || strings.ContainsAny(host, "/@[]") || (strings.Contains(host, ":") && net.ParseIP(host) == nil) || !validPort(port) {
			return bad("bad endpoint %q: want host or host:port", hp)
		}
		cfg.Endpoints = append(cfg.Endpoints, scheme+"://"+net.JoinHostPort(host, port))
	}

	cfg.DialTimeout = defaultDialTimeout
	var caFile, certFile, keyFile string
	for k, vs := range u.Query() {
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
	return cfg, shown, nil
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
