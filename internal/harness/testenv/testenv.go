// Package testenv is what Tenure's tests share: the real servers backend
// tests run against, the scaffolding of the stores' own tests, and the
// state of processes the end-to-end tests start.
//
// Each server's address comes from an environment variable with a default
// for a developer machine. When the server does not answer, the test is
// skipped with a message that says how to start it — unless CI=true is
// set, where a missing server fails the test: CI must never pass by
// skipping.
package testenv

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// Server describes one external server a test needs.
type Server struct {
	Name    string // "PostgreSQL"
	EnvVar  string // variable holding the URL, e.g. TENURE_TEST_POSTGRES
	Default string // URL used when EnvVar is unset
	Addr    string // host:port probed for reachability when EnvVar is unset
}

var (
	// Postgres is the PostgreSQL server for backend tests.
	Postgres = Server{"PostgreSQL", "TENURE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "127.0.0.1:5432"}
	// MySQL is the MySQL or MariaDB server for backend tests.
	MySQL = Server{"MySQL/MariaDB", "TENURE_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test", "127.0.0.1:3306"}
	// Redis is the Redis server for backend tests.
	Redis = Server{"Redis", "TENURE_TEST_REDIS", "redis://127.0.0.1:6379/0", "127.0.0.1:6379"}
	// Etcd is the etcd server for backend tests.
	Etcd = Server{"etcd", "TENURE_TEST_ETCD", "etcd://127.0.0.1:2379", "127.0.0.1:2379"}
)

// InCI reports whether the tests run in CI, where skips are failures.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// URL returns the server's URL, or skips (fails in CI) when it is not
// reachable.
func (s Server) URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(s.EnvVar)
	addr := s.Addr
	if url == "" {
		url = s.Default
	} else {
		addr = ""
	}
	if addr != "" {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			Unavailable(t, s.Name+" is not reachable at "+addr+" ("+err.Error()+"); start it or set "+s.EnvVar)
			return ""
		}
		conn.Close()
	}
	return url
}

// Unavailable skips the test with reason, or fails it when running in CI.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and a required server is missing: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
}
