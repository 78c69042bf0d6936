// Package e2e_test runs the engine (package tenure) end to end on real
// stores — PostgreSQL, SQLite files and Redis — with real time: crashed
// holders replaced after TTL + grace, graceful handoffs through the stores'
// push channels, handoffs between two processes sharing an SQLite file,
// and the benchmarks behind BENCHMARKS.md.
//
// PostgreSQL and Redis come from internal/harness/testenv: the tests skip when the
// servers are not reachable, and fail instead under CI=true.
package e2e_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// A child process (see process_test.go) is this test binary re-run as
	// a second replica; it never returns to the test framework.
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	goleak.VerifyTestMain(m)
}
