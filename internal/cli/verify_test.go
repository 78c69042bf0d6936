package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
)

func TestVerifyRefusesAFaultKindItCannotInject(t *testing.T) {
	store := "sqlite:" + filepath.Join(t.TempDir(), "leases.db")
	for _, c := range []struct{ faults, want string }{
		{"kill,log-stal", `unknown fault kind "log-stal"`},
		// Restarting the store needs a server the harness owns.
		{"store-restart", `unknown fault kind "store-restart"`},
	} {
		e, _, errOut := testEnv(nil)
		code := e.main(t.Context(), []string{"verify", "--store", store, "--faults", c.faults})
		if code != ExitUsage || !strings.Contains(errOut.String(), c.want) ||
			!strings.Contains(errOut.String(), "log-stall,slow-store,same-owner") {
			t.Errorf("--faults %s: exit %d, stderr %q; want %d naming %s and the known kinds", c.faults, code, errOut.String(), ExitUsage, c.want)
		}
	}
}

func TestVerifyRefusesAPoolFaultWithoutAPool(t *testing.T) {
	store := "sqlite:" + filepath.Join(t.TempDir(), "leases.db")
	for _, args := range [][]string{{"--faults", "source-down", "--pool-keys", "0"}, {"--pool-keys", "65"}, {"--pool-keys", "-1"}} {
		e, _, errOut := testEnv(nil)
		code := e.main(t.Context(), append([]string{"verify", "--store", store}, args...))
		if code != ExitUsage || !strings.Contains(errOut.String(), "pool") {
			t.Errorf("%v: exit %d, stderr %q; want %d naming the pool", args, code, errOut.String(), ExitUsage)
		}
	}
}

func TestVerifyHelpListsEveryFaultKind(t *testing.T) {
	e, out, _ := testEnv(nil)
	if code := e.main(t.Context(), []string{"verify", "--help"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, k := range verifyFaults(true, true) {
		if !strings.Contains(out.String(), "\n  "+k+" ") {
			t.Errorf("verify --help does not describe %s:\n%s", k, out.String())
		}
	}
}

func TestVerifyHelpListsEveryStore(t *testing.T) {
	e, out, _ := testEnv(nil)
	if code := e.main(t.Context(), []string{"verify", "--help"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, form := range strings.Split(storeurl.Supported, ", ") {
		if !strings.Contains(out.String(), strings.TrimSuffix(form, "PATH")) {
			t.Errorf("verify --help does not list %s:\n%s", form, out.String())
		}
	}
}

// A proxy per replica stands in for each TCP address: a unix socket, or a
// host list where the store takes one host, is a usage error, named
// without the password.
func TestVerifyRefusesAStoreAProxyCannotStandInFor(t *testing.T) {
	for _, store := range []string{
		"mysql://root:hunter2-pw@/test?socket=/run/mysqld/mysqld.sock",
		"postgres://u:hunter2-pw@/db?host=/run/postgresql",
	} {
		e, _, errOut := testEnv(nil)
		code := e.main(t.Context(), []string{"verify", "--store", store})
		if code != ExitUsage || !strings.Contains(errOut.String(), "TCP host") || strings.Contains(errOut.String(), "hunter2") {
			t.Errorf("%s: exit %d, stderr %q; want %d explaining the proxy, without the password", store, code, errOut.String(), ExitUsage)
		}
	}
}
