package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
)

func TestKeysListDropsBlanksAndRepeats(t *testing.T) {
	keys, err := splitKeys(" a, b,,a ,c,")
	if err != nil || !slices.Equal(keys, []string{"a", "b", "c"}) {
		t.Errorf("splitKeys = %q, %v", keys, err)
	}
	for _, bad := range []string{"a,b\x01c", "a,b\xffc"} {
		if _, err := splitKeys(bad); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("splitKeys(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
}

func TestPoolUsageErrorsAreReportedBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	// Port 1 refuses: a case that got as far as connecting would exit 3.
	unreachable := "postgres://u@127.0.0.1:1/db?connect_timeout=1"
	badKeys := filepath.Join(dir, "keys")
	if err := os.WriteFile(badKeys, []byte("good\nbad\x01key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		args    []string
		code    int
		mention string
	}{
		{"no key source", []string{"--", "true"}, ExitUsage, "exactly one of --keys, --keys-file and --keys-cmd (got 0)"},
		{"two key sources", []string{"--keys", "a", "--keys-cmd", "echo a", "--", "true"}, ExitUsage, "got 2: --keys, --keys-cmd"},
		{"missing key file", []string{"--keys-file", filepath.Join(dir, "none"), "--", "true"}, ExitUsage, "key file"},
		{"bad key in the file", []string{"--keys-file", badKeys, "--", "true"}, ExitUsage, "control character"},
		{"failing key command", []string{"--keys-cmd", "echo oops >&2; exit 3", "--", "true"}, ExitUsage, "oops"},
		{"hanging key command", []string{"--keys-cmd", "sleep 5 & echo a", "--keys-timeout", "200ms", "--", "true"}, ExitUsage, "--keys-timeout 200ms passed"},
		{"bad pool name", []string{"--keys", "a", "--name", "no-dashes", "--", "true"}, ExitUsage, "--name"},
		{"negative max", []string{"--keys", "a", "--max", "-1", "--", "true"}, ExitUsage, "--max"},
		{"zero weight", []string{"--keys", "a", "--weight", "0", "--", "true"}, ExitUsage, "--weight"},
		{"infinite weight", []string{"--keys", "a", "--weight", "inf", "--", "true"}, ExitUsage, "finite"},
		{"NaN weight", []string{"--keys", "a", "--weight", "NaN", "--", "true"}, ExitUsage, "finite"},
		{"zero refresh", []string{"--keys", "a", "--refresh", "0s", "--", "true"}, ExitUsage, "--refresh"},
		{"command before --", []string{"--keys", "a", "true"}, ExitUsage, "after --"},
		{"no command", []string{"--keys", "a"}, ExitUsage, "missing command"},
		{"stop timeout too long", []string{"--keys", "a", "--ttl", "3s", "--grace", "1s", "--", "true"}, ExitUsage, "--stop-timeout"},
		{"missing command", []string{"--keys", "a", "--", "no-such-command-here"}, ExitNoFound, "command not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _, errOut := testEnv(nil)
			args := append([]string{"pool", "--store", unreachable}, c.args...)
			if code := e.main(t.Context(), args); code != c.code {
				t.Errorf("exit %d, want %d; stderr %q", code, c.code, errOut)
			}
			if !strings.Contains(errOut.String(), c.mention) {
				t.Errorf("stderr %q does not mention %q", errOut, c.mention)
			}
		})
	}
}

func TestKeyPlaceholderIsReplacedInTheCommandAndItsArguments(t *testing.T) {
	r, err := newCommandRunner([]string{"sh", "-c", "work {key} --in /data/{key}", "x{key}"}, true, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	path, args, err := r.command(tenure.Lease{Key: "acct-7"})
	if err != nil || filepath.Base(path) != "sh" {
		t.Fatalf("command = %q, %v", path, err)
	}
	if want := []string{"-c", "work acct-7 --in /data/acct-7", "xacct-7"}; !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	if r.args[1] != "work {key} --in /data/{key}" {
		t.Errorf("the template itself changed: %q", r.args)
	}

	// A program named by its key is looked up for each key.
	dir := t.TempDir()
	prog := filepath.Join(dir, "worker-a")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	r, err = newCommandRunner([]string{filepath.Join(dir, "worker-{key}")}, true, time.Second, nil)
	if err != nil {
		t.Fatalf("a program named by its key was looked up at start: %v", err)
	}
	if path, _, err := r.command(tenure.Lease{Key: "a"}); err != nil || path != prog {
		t.Errorf("command for a = %q, %v", path, err)
	}
	if _, _, err := r.command(tenure.Lease{Key: "b"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("command for b, which has no program: %v", err)
	}

	// tenure run has no placeholder: {key} is passed as it is.
	r, err = newCommandRunner([]string{"echo", "{key}"}, false, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, args, _ := r.command(tenure.Lease{Key: "k"}); !slices.Equal(args, []string{"{key}"}) {
		t.Errorf("run replaced the placeholder: %q", args)
	}
}

func TestStartReadIsTheFirstAnswerOfTheKeySource(t *testing.T) {
	calls := 0
	src := primed(tenure.KeySourceFunc(func(context.Context) ([]string, error) {
		calls++
		return []string{"fresh"}, nil
	}), []string{"at-start"})
	first, _ := src.Keys(t.Context())
	second, _ := src.Keys(t.Context())
	if !slices.Equal(first, []string{"at-start"}) || !slices.Equal(second, []string{"fresh"}) || calls != 1 {
		t.Errorf("reads %q then %q with %d calls; want the start read, then one call", first, second, calls)
	}
}

func TestStatusTableListsPoolWorkersApartWithTheKeysTheyHold(t *testing.T) {
	leases := []store.Lease{
		{Key: tenure.PoolPrefix + "mail/a", Owner: "w1", Epoch: 3, Live: true, Running: true, TimeLeft: 2 * time.Second},
		{Key: tenure.PoolPrefix + "mail/b", Owner: "w1", Epoch: 1, Live: true, Running: true, TimeLeft: 2 * time.Second},
		{Key: tenure.PoolPrefix + "mail/c", Owner: "w2", Epoch: 2, Live: true, Running: true, TimeLeft: 2 * time.Second},
		{Key: tenure.PoolPrefix + "mail/d", Owner: "w3", Epoch: 1, Released: true},
		{Key: tenure.PoolPrefix + "other/e", Owner: "w1", Epoch: 1, Live: true, Running: true, TimeLeft: 2 * time.Second},
		{Key: "singleton", Owner: "w1", Epoch: 1, Live: true, Running: true, TimeLeft: 2 * time.Second},
		{Key: tenure.WorkerPrefix + "mail/w1@1", Owner: "w1", Epoch: 1, Live: true, Running: true, TimeLeft: time.Second},
		{Key: tenure.WorkerPrefix + "mail/w2@2.5,max=8", Owner: "w2", Epoch: 1, Live: true, Running: false, TimeLeft: time.Second},
		{Key: tenure.WorkerPrefix + "mail/w3@1", Owner: "w3", Epoch: 1, Released: true},
	}
	var out bytes.Buffer
	writeTable(&out, leases)
	got := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^KEY\s+OWNER\s+EPOCH\s+STATE\s+RUNNING\s+TIME LEFT$`),
		regexp.MustCompile(`(?m)^POOL\s+WORKER\s+WEIGHT\s+MAX\s+STATE\s+KEYS\s+TIME LEFT$`),
		regexp.MustCompile(`(?m)^mail\s+w1\s+1\s+-\s+active\s+2\s+1s$`),
		regexp.MustCompile(`(?m)^mail\s+w2\s+2\.5\s+8\s+draining\s+1\s+1s$`),
		regexp.MustCompile(`(?m)^mail\s+w3\s+1\s+-\s+released\s+-\s+-$`),
	} {
		if !want.MatchString(got) {
			t.Errorf("table does not match %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "~workers/") {
		t.Errorf("membership leases shown among the keys:\n%s", got)
	}

	out.Reset()
	writeTable(&out, leases[6:7])
	if strings.Contains(out.String(), "KEY ") || !strings.Contains(out.String(), "w1") {
		t.Errorf("workers without keys:\n%s", out.String())
	}
}
