package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/child"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
)

func testEnv(vars map[string]string) (*env, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &env{stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}, &out, &errOut
}

// flagsAfter parses args for a command with the run flags and applies the
// environment, as the root command does before RunE.
func flagsAfter(t *testing.T, e *env, args ...string) *cobra.Command {
	t.Helper()
	cmd := e.runCommand()
	cmd.PersistentFlags().String("log-level", "info", "")
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if err := e.applyEnv(cmd); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestFlagOnTheCommandLineWinsOverItsVariable(t *testing.T) {
	e, _, _ := testEnv(map[string]string{"TENURE_TTL": "9s", "TENURE_GRACE": "2s", "TENURE_STOP_TIMEOUT": "1500ms", "TENURE_ONCE": "true"})
	cmd := flagsAfter(t, e, "--ttl", "30s")
	ttl, _ := cmd.Flags().GetDuration("ttl")
	grace, _ := cmd.Flags().GetDuration("grace")
	stop, _ := cmd.Flags().GetDuration("stop-timeout")
	once, _ := cmd.Flags().GetBool("once")
	if ttl != 30*time.Second || grace != 2*time.Second || stop != 1500*time.Millisecond || !once {
		t.Errorf("ttl %v grace %v stop-timeout %v once %v; want the flag's 30s and the variables' 2s, 1.5s, true", ttl, grace, stop, once)
	}
}

func TestKeyAndOwnerOfAParentTenureAreNotFlagDefaults(t *testing.T) {
	vars := map[string]string{"TENURE_KEY": "parent-key", "TENURE_OWNER": "parent-owner", "TENURE_STORE": "sqlite:x.db"}
	e, _, _ := testEnv(vars)
	cmd := flagsAfter(t, e)
	if key, _ := cmd.Flags().GetString("key"); key != "parent-key" {
		t.Fatalf("without TENURE_EPOCH, TENURE_KEY should set --key; got %q", key)
	}
	vars["TENURE_EPOCH"] = "7"
	cmd = flagsAfter(t, e)
	key, _ := cmd.Flags().GetString("key")
	owner, _ := cmd.Flags().GetString("owner")
	st, _ := cmd.Flags().GetString("store")
	if key != "" || owner != "" || st != "sqlite:x.db" {
		t.Errorf("inside a tenure child: key %q owner %q store %q; want the lease's variables ignored, the store kept", key, owner, st)
	}
}

func TestBadVariableIsAUsageErrorNamingIt(t *testing.T) {
	e, _, errOut := testEnv(map[string]string{"TENURE_GRACE": "a while"})
	code := e.main(t.Context(), []string{"run", "--key", "k", "--", "true"})
	if code != ExitUsage || !strings.Contains(errOut.String(), "TENURE_GRACE") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestHTTPAddressMustBeLoopbackUnlessPublic(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9090", "127.1.2.3:1", "[::1]:9090", "localhost:9090"} {
		if err := checkListenAddr(addr, false); err != nil {
			t.Errorf("%s refused: %v", addr, err)
		}
	}
	for _, addr := range []string{":9090", "0.0.0.0:9090", "[::]:9090", "10.0.0.5:9090", "example.com:80"} {
		if err := checkListenAddr(addr, false); err == nil {
			t.Errorf("%s accepted without --http-public", addr)
		}
		if err := checkListenAddr(addr, true); err != nil {
			t.Errorf("%s refused with --http-public: %v", addr, err)
		}
	}
	if err := checkListenAddr("9090", true); err == nil {
		t.Error("an address without a port was accepted")
	}
}

func TestStopTimeoutMustEndBeforeAPeerMayStart(t *testing.T) {
	ok := replicaFlags{ttl: 15 * time.Second, grace: 5 * time.Second, stopTimeout: 5 * time.Second}
	if err := checkTiming(ok); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	bad := replicaFlags{ttl: 3 * time.Second, grace: time.Second, stopTimeout: 2 * time.Second}
	if err := checkTiming(bad); err == nil || !strings.Contains(err.Error(), "--stop-timeout") {
		t.Errorf("stop timeout equal to ttl/3 + grace accepted: %v", err)
	}
}

func TestEngineConfigErrorsNameTheFlag(t *testing.T) {
	_, err := tenure.New(tenure.Config{Store: nil, Leases: tenure.LeasesOff, TTL: time.Millisecond})
	if err == nil {
		t.Fatal("1ms TTL accepted")
	}
	if got := flagNames(err); !strings.HasPrefix(got.Error(), "--ttl: ") || !errors.Is(got, tenure.ErrConfig) {
		t.Errorf("flagNames(%v) = %v", err, got)
	}
}

func TestChildEnvironmentCarriesTheLeaseAndTheStoreWithoutItsCredentials(t *testing.T) {
	spec, err := storeurl.Parse("postgres://app:p@ss:w0rd@db/ops?sslmode=disable&sslpassword=k3y&table=jobs")
	if err != nil {
		t.Fatal(err)
	}
	env, dropped := commandEnv([]string{
		"PATH=/bin", "TENURE_KEY=old", "TENURE_FENCE_KEY=old", "TENURE_EPOCH=1", "TENURE_OWNER=parent",
		"TENURE_STORE=postgres://app:p@ss:w0rd@db/ops", "TENURE_TTL=9s",
		"TENURE_KEYS_CMD=psql -Atc 'select id' postgres://app:p@ss:w0rd@db/ops", // the store's password
		"TENURE_RESOURCE=redis://:other@cache/0",                                // a credential of its own
		"TENURE_HOOK=PGPASSWORD=x ./hook",
		"DATABASE_URL=postgres://app:own@db/app", // not tenure's: the user's to pass
	}, spec)
	got := childEnv(context.Background(), env, tenure.Lease{Key: "new", FenceKey: "~pool/p/new", Epoch: 42, Owner: "me"})
	want := []string{"PATH=/bin", "TENURE_TTL=9s", "DATABASE_URL=postgres://app:own@db/app",
		"TENURE_STORE=postgres://app@db/ops?sslmode=disable&table=jobs", "TENURE_KEY=new", "TENURE_FENCE_KEY=~pool/p/new", "TENURE_EPOCH=42", "TENURE_OWNER=me"}
	if !slices.Equal(got, want) {
		t.Errorf("childEnv = %q, want %q", got, want)
	}
	if want := []string{"TENURE_KEYS_CMD", "TENURE_RESOURCE", "TENURE_HOOK"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
}

func TestDemoRunsInProcessAndEndsOnItsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about six seconds")
	}
	// In process, so the race detector watches the demo and the engine.
	t.Setenv("TMPDIR", t.TempDir())
	e, out, errOut := testEnv(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if code := e.main(ctx, []string{"demo"}); code != 0 {
		t.Fatalf("demo exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out.String(), "At no moment did two replicas run the same key") {
		t.Errorf("demo output:\n%s", out)
	}
	if entries, _ := os.ReadDir(os.Getenv("TMPDIR")); len(entries) != 0 {
		t.Errorf("demo left %d entries in its temporary directory", len(entries))
	}
}

func TestMain(m *testing.M) {
	// The tests that start commands start them through this binary as guard.
	child.RunGuardIfRequested()
	goleak.VerifyTestMain(m)
}
