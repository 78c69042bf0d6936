package tenure

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// KeySource supplies a pool's keys: every live mail account, every tenant.
// It is the source of truth: a key that leaves it has its runner stopped
// and its lease released.
type KeySource interface {
	Keys(ctx context.Context) ([]string, error)
}

// KeySourceFunc adapts a function to KeySource.
type KeySourceFunc func(ctx context.Context) ([]string, error)

// Keys calls f(ctx).
func (f KeySourceFunc) Keys(ctx context.Context) ([]string, error) { return f(ctx) }

// StaticKeys is a fixed key set.
func StaticKeys(keys ...string) KeySource {
	keys = slices.Clone(keys)
	return KeySourceFunc(func(context.Context) ([]string, error) { return keys, nil })
}

// KeysFromFile reads one key per line from path, trimmed of surrounding
// whitespace (blank lines and lines starting with # are skipped). The file is read again only when its size
// or modification time changed.
func KeysFromFile(path string) KeySource {
	return &fileSource{path: path}
}

type fileSource struct {
	path string

	mu    sync.Mutex
	size  int64
	mtime time.Time
	keys  []string
}

func (f *fileSource) Keys(ctx context.Context) ([]string, error) {
	info, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys != nil && info.Size() == f.size && info.ModTime().Equal(f.mtime) {
		return f.keys, nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	keys, err := parseKeys(data, f.path)
	if err != nil {
		return nil, err
	}
	f.keys, f.size, f.mtime = keys, info.Size(), info.ModTime()
	return keys, nil
}

// KeysFromCommand runs name with args on every refresh and takes each line
// of its standard output as a key. A command that fails or times out
// (ctx) keeps the previous key set in force. The command runs in a
// process group of its own, killed whole when the read times out or once
// the command has exited: a read never outlives its context by more than
// a moment, even when the command left a process in the background.
func KeysFromCommand(name string, args ...string) KeySource {
	return KeysFromCmd(func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, name, args...) })
}

// KeysFromCmd is [KeysFromCommand] for a command the caller prepares, with
// an environment or a directory of its own. newCmd makes a new command for
// every refresh (an exec.Cmd runs once), bound to ctx as
// exec.CommandContext binds it; its Stdout and Stderr are set here.
func KeysFromCmd(newCmd func(ctx context.Context) *exec.Cmd) KeySource {
	return KeySourceFunc(func(ctx context.Context) ([]string, error) {
		cmd := newCmd(ctx)
		name := cmd.Args[0]
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		// Its own process group, killed whole when ctx ends; and no wait
		// past a moment for output pipes that a process it left in the
		// background still holds: either would let a read outlive ctx.
		inOwnGroup(cmd)
		cmd.WaitDelay = commandWaitDelay
		out, err := cmd.Output()
		killGroup(cmd) // whatever it left behind must not run on
		switch {
		case err == nil:
		case ctx.Err() != nil:
			err = fmt.Errorf("no answer in time: %w", context.Cause(ctx))
		case errors.Is(err, exec.ErrWaitDelay):
			err = errors.New("it left a process holding its output")
		}
		if err != nil {
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				if len(msg) > 200 {
					msg = msg[:200] + "…"
				}
				err = fmt.Errorf("%w: %s", err, msg)
			}
			return nil, fmt.Errorf("key command %q: %w", name, err)
		}
		return parseKeys(out, "key command "+name)
	})
}

// commandWaitDelay is how long a key command's output pipes may stay open
// after it exited or its context ended.
const commandWaitDelay = 500 * time.Millisecond

// parseKeys splits lines into keys, trimmed of surrounding whitespace,
// skipping blank lines and # comments, and validates each.
func parseKeys(data []byte, from string) ([]string, error) {
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		// Surrounding blanks (an editor's trailing space, CRLF) are never
		// part of a key: "acct-1 " and "acct-1" must not be two keys.
		k := strings.TrimSpace(sc.Text())
		if k == "" || strings.HasPrefix(k, "#") {
			continue
		}
		if err := store.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", from, line, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return keys, nil
}
