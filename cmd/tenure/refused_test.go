package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// TestRunGivesUpWhenTheStoreRefusesItsRightsOnPostgres: a role that may
// not create the lease table makes run and pool exit 1 with the server's
// reason after a bounded number of tries, instead of warning forever;
// under --once it is Tenure's own failure, 125.
func TestRunGivesUpWhenTheStoreRefusesItsRightsOnPostgres(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresWithoutRights(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "table=" + testenv.UniqueName("cli_refused_")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "--key", "job", "--ttl", "3s", "--store", url, "--", "sleep", "60"}, 1},
		{[]string{"run", "--once", "--key", "job", "--ttl", "3s", "--store", url, "--", "sleep", "60"}, 125},
		{[]string{"pool", "--name", "accts", "--keys", "a,b,c", "--ttl", "3s", "--store", url, "--", "sleep", "60"}, 1},
	} {
		began := time.Now()
		_, stderr, code := runTenure(t, nil, c.args...)
		took := time.Since(began)
		if code != c.code || !strings.Contains(stderr, "giving up: the store keeps refusing access") || !strings.Contains(stderr, "permission denied") {
			t.Errorf("%v: exit %d after %v, want %d and the reason; stderr:\n%s", c.args[:2], code, took, c.code, stderr)
		}
		t.Logf("%v gave up after %v", c.args[:2], took.Round(time.Millisecond))
	}
}
