package sqlite

import (
	"bufio"
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
// works on the file it names; its value is a JSON childRequest.
const helperEnv = "TENURE_SQLITE_HELPER"

// childRequest tells the child process what to do: with Rounds 0, acquire
// Key once and print the AcquireResult; otherwise acquire and release Key
// Rounds times, with pauses, and print a childRelease per round; after each
// release it waits for a line on stdin, the parent's word that it saw the
// release (a re-acquisition before the parent's next look would hide it).
type childRequest struct {
	Path, Key, Owner string
	Rounds           int
}

// childRelease is one release made by the child: the term, and the wall
// clock just before the Release call (same host, so comparable with ours).
type childRelease struct {
	Epoch    int64
	Released int64 // UnixNano
}

// TestHelperProcess is not a test: it is the body of the child process the
// cross-process tests start by re-running this test binary.
func TestHelperProcess(t *testing.T) {
	args := os.Getenv(helperEnv)
	if args == "" {
		t.Skip("runs only as a child process")
	}
	var req childRequest
	if err := json.Unmarshal([]byte(args), &req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, req.Path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if req.Rounds > 0 {
		out, err := cycle(ctx, s, req)
		s.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		json.NewEncoder(os.Stdout).Encode(out)
		os.Exit(0)
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

// cycle acquires and releases req.Key req.Rounds times. The pauses vary so
// that releases fall at every phase of the watching process's poll.
func cycle(ctx context.Context, s *Store, req childRequest) ([]childRelease, error) {
	var out []childRelease
	acks := bufio.NewReader(os.Stdin)
	for i := range req.Rounds {
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: req.Key, Owner: req.Owner, TTL: time.Minute, Grace: time.Second})
		if err != nil {
			return nil, err
		}
		if !res.Acquired {
			return nil, fmt.Errorf("round %d: refused, holder %+v", i, res.Holder)
		}
		time.Sleep(time.Duration(20+i*37%60) * time.Millisecond)
		at := time.Now().UnixNano()
		if err := s.Release(ctx, req.Owner, []store.Term{{Key: req.Key, Epoch: res.Epoch}}); err != nil {
			return nil, err
		}
		out = append(out, childRelease{Epoch: res.Epoch, Released: at})
		if _, err := acks.ReadString('\n'); err != nil {
			return nil, fmt.Errorf("round %d: waiting for the parent: %w", i, err)
		}
		time.Sleep(time.Duration(i*53%70) * time.Millisecond)
	}
	return out, nil
}

// childCommand is the command that runs req in a separate process.
func childCommand(req childRequest) *exec.Cmd {
	args, _ := json.Marshal(req)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(args))
	return cmd
}

// acquireInChild runs an acquisition in a separate process.
func acquireInChild(t *testing.T, path, key, owner string) store.AcquireResult {
	t.Helper()
	out, err := childCommand(childRequest{Path: path, Key: key, Owner: owner}).Output()
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
