package tenure_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

func TestAKeyCommandsLinesAreItsKeys(t *testing.T) {
	keys, err := tenure.KeysFromCommand("sh", "-c", "printf 'a\\n# comment\\n\\nb\\n'").Keys(t.Context())
	if err != nil || !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %q, %v", keys, err)
	}
}

func TestKeysFromAFileAreTrimmedOfSurroundingWhitespace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("acct-1 \r\n\tacct-2\n  # a comment\n \nacct-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := tenure.KeysFromFile(path).Keys(t.Context())
	if err != nil || !slices.Equal(keys, []string{"acct-1", "acct-2", "acct-1"}) {
		t.Fatalf("keys %q, %v; want acct-1, acct-2, acct-1 (a pool counts a repeat once)", keys, err)
	}
}

// A key command that hangs, or that leaves a process in the background
// holding its output, returns once its context ends — the pool then keeps
// its last good key set — and leaves nothing running.
func TestAKeyCommandNeverOutlivesItsContext(t *testing.T) {
	for name, script := range map[string]string{
		"hangs":                   "echo $$ > %s; exec sleep 30",
		"leaves a process behind": "sh -c 'echo $$ > %s; exec sleep 30' & echo a",
	} {
		t.Run(name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			src := tenure.KeysFromCommand("sh", "-c", strings.Replace(script, "%s", pidFile, 1))
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			began := time.Now()
			_, err := src.Keys(ctx)
			took := time.Since(began)
			if err == nil {
				t.Fatal("the read succeeded; want an error so the last good key set stays")
			}
			if took > 3*time.Second {
				t.Fatalf("the read returned %v after a 300ms timeout", took)
			}
			data, rerr := os.ReadFile(pidFile)
			pid, perr := strconv.Atoi(strings.TrimSpace(string(data)))
			if rerr != nil || perr != nil {
				t.Fatalf("pid file: %v %v", rerr, perr)
			}
			deadline := time.Now().Add(2 * time.Second)
			for !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				if time.Now().After(deadline) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("process %d the key command started still runs", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("returned after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}
