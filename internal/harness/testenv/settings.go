package testenv

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A report test measures for BENCHMARKS.md: it runs for minutes, so only
// when -run names it (ReportOnly), never in CI, and takes its size from
// the environment; PositiveInt and PositiveDuration read one setting, or
// def when it is unset, and fail the test on a value that is not one.

// ReportOnly skips the report test t unless -run names it.
func ReportOnly(t *testing.T) {
	t.Helper()
	if f := flag.Lookup("test.run"); f == nil || !strings.Contains(f.Value.String(), t.Name()) {
		t.Skipf("a report: runs only with -run %s", t.Name())
	}
}

// PositiveInt reads a whole number above zero.
func PositiveInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a whole number above zero", name, v)
	}
	return n
}

// PositiveDuration reads a duration above zero, such as 90s or 2m.
func PositiveDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration above zero, such as 90s or 2m", name, v)
	}
	return d
}
