package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// helperEnv, when set, turns TestHelperProcess into a second process that
// acquires a key from the file it names (TENURE_SQLITE_HELPER=path|key|owner).
const helperEnv = "TENURE_SQLITE_HELPER"

// TestHelperProcess is not a test: it is the body of the child process the
// cross-process tests start by re-running this test binary.
func TestHelperProcess(t *testing.T) {
	args := os.Getenv(helperEnv)
	if args == "" {
		t.Skip("runs only as a child process")
	}
	var req struct{ Path, Key, Owner string }
	if err := json.Unmarshal([]byte(args), &req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, req.Path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: req.Key, Owner: req.Owner, TTL: time.Minute, Grace: time.Second})
	s.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(res)
	os.Exit(0)
}

// acquireInChild runs an acquisition in a separate process.
func acquireInChild(t *testing.T, path, key, owner string) store.AcquireResult {
	t.Helper()
	args, _ := json.Marshal(struct{ Path, Key, Owner string }{path, key, owner})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(args))
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("child process: %v: %s", err, stderr)
	}
	var res store.AcquireResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	return res
}

func TestAnotherProcessIsRefusedWhileThisOneHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared", "leases.db")
	s := openAt(t, path, Options{})
	epoch := mustAcquire(t, s, "nightly-report", "parent")

	res := acquireInChild(t, path, "nightly-report", "child")
	if res.Acquired {
		t.Fatal("the child process acquired a key this process holds")
	}
	if res.Holder.Owner != "parent" || res.Holder.Epoch != epoch || !res.Holder.Live {
		t.Fatalf("child saw holder %+v, want parent's live epoch %d", res.Holder, epoch)
	}

	if err := s.Release(context.Background(), "parent", []store.Term{{Key: "nightly-report", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	res = acquireInChild(t, path, "nightly-report", "child")
	if !res.Acquired || res.Epoch != epoch+1 {
		t.Fatalf("child after release: %+v, want acquired at epoch %d", res, epoch+1)
	}
	// And this process now sees the child's term.
	if again := acquire(t, s, "nightly-report", "parent", time.Minute, time.Second); again.Acquired || again.Holder.Owner != "child" {
		t.Fatalf("parent after the child took over: %+v", again)
	}
}
