package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// childEnv, when set, makes the test binary a child replica (see TestMain):
// a supervisor for one key on an SQLite file, driven through stdin
// ("disable", "enable"; end of input shuts it down gracefully) and
// reporting on stdout, one JSON object per line.
const childEnv = "TENURE_E2E_CHILD"

type childSpec struct {
	Path      string
	Key       string
	TTL       time.Duration
	Grace     time.Duration
	WatchPoll time.Duration // sqlite.Options.WatchPoll; negative turns the poller off
}

// childMsg is one line of a child's report. Times are wall-clock Unix
// nanoseconds: the two processes share a host, hence a clock, but not a
// monotonic clock reading.
type childMsg struct {
	Ev    string `json:"ev"` // start, stop, release, refused
	Epoch int64  `json:"epoch,omitempty"`
	Wall  int64  `json:"wall,omitempty"`
	Err   string `json:"err,omitempty"`
}

// runChild is the child process's main; it returns the exit code.
func runChild(spec string) int {
	var sp childSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "child spec:", err)
		return 2
	}
	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(m childMsg) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(m)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, sp.Path, sqlite.Options{WatchPoll: sp.WatchPoll})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	defer st.Close()
	p := newPartition(st)
	p.onRelease = func(at time.Time) { emit(childMsg{Ev: "release", Wall: at.UnixNano()}) }
	p.onRefused = func() { emit(childMsg{Ev: "refused"}) }
	sup, err := tenure.New(tenure.Config{
		Store: p, Leases: tenure.LeasesOn, Owner: "child-" + randomHex(3),
		TTL: sp.TTL, Grace: sp.Grace, StopTimeout: time.Second, Logger: testLogger().With("replica", "child"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	runner := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		emit(childMsg{Ev: "start", Epoch: l.Epoch, Wall: time.Now().UnixNano()})
		<-ctx.Done()
		emit(childMsg{Ev: "stop", Epoch: l.Epoch, Wall: time.Now().UnixNano(), Err: fmt.Sprint(context.Cause(ctx))})
		return nil
	})
	if err := sup.Set(sp.Key, tenure.Job{Runner: runner}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "disable":
			err = sup.SetEnabled(sp.Key, false)
		case "enable":
			err = sup.SetEnabled(sp.Key, true)
		default:
			err = fmt.Errorf("unknown command %q", in.Text())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "child Run:", err)
		return 1
	}
	return 0
}

// child is a child replica seen from the parent. Its runner's starts and
// stops go into the parent's timeline under the name "child", with
// wall-clock times (time.Time.Sub then compares wall clocks).
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error

	mu       sync.Mutex
	releases []time.Time
	refusals int
}

func startChild(t testing.TB, tl *timeline, sp childSpec) *child {
	t.Helper()
	spec, _ := json.Marshal(sp)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the child process: %v", err)
	}
	c := &child{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m childMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				continue
			}
			at := time.Unix(0, m.Wall)
			switch m.Ev {
			case "start", "stop":
				var cause error
				if m.Err != "" {
					cause = fmt.Errorf("%s", m.Err)
				}
				tl.add(event{who: "child", kind: m.Ev, key: sp.Key, epoch: m.Epoch, at: at, cause: cause})
			case "release":
				c.mu.Lock()
				c.releases = append(c.releases, at)
				c.mu.Unlock()
			case "refused":
				c.mu.Lock()
				c.refusals++
				c.mu.Unlock()
			}
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("child process: %v", err)
		}
	})
	return c
}

func (c *child) send(t testing.TB, command string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, command+"\n"); err != nil {
		t.Fatalf("child %s: %v", command, err)
	}
}

// stop ends the child's input, which shuts it down gracefully, and waits;
// a child that hangs is killed.
func (c *child) stop() error {
	if c.stdin == nil {
		return nil
	}
	c.stdin.Close()
	c.stdin = nil
	select {
	case err := <-c.done:
		return err
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("did not exit within 15s; killed")
	}
}

func (c *child) Releases() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.releases...)
}

func (c *child) Refusals() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusals
}

// TestTwoProcessesSharingAnSQLiteFileHandOverWithoutWaitingForExpiry: two
// processes share one file; the holder shuts down and the peer process must
// start within one supervision round (RenewEvery, 1s here), never waiting
// for the released lease to expire (3s + 1s grace here). SQLite cannot
// push to another process: store/sqlite's Watch polls the file for other
// processes' changes (every 50ms by default), and without that poller the
// engine finds the release in its next round's read of the lease table.
// Both paths are run; the release falls 300ms after the child's first
// round, so without the poller it is found ~700ms later, and the poller's
// bound (500ms) tells the two apart.
func TestTwoProcessesSharingAnSQLiteFileHandOverWithoutWaitingForExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second process and waits up to a round")
	}
	for _, c := range []struct {
		name  string
		poll  time.Duration
		bound time.Duration
	}{
		{"watch-poll=50ms", sqlite.DefaultWatchPoll, 500 * time.Millisecond},
		{"watch-poll=off", -1, crashRenew + 500*time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "shared", "leases.db")
			const key = "nightly-report"
			var tl timeline

			a := newReplica(t, "A", openSQLite(t, path, sqlite.Options{WatchPoll: c.poll}), crashConfig(), tl.runner("A"), key).start()
			aStart := tl.await(t, 5*time.Second, 0, "A", "start", key)
			ch := startChild(t, &tl, childSpec{Path: path, Key: key, TTL: crashTTL, Grace: crashGrace, WatchPoll: c.poll})
			waitUntil(t, 10*time.Second, "the child to be refused the key", func() bool { return ch.Refusals() > 0 })
			time.Sleep(300 * time.Millisecond)

			if err := a.stop(); err != nil {
				t.Fatalf("A's Run: %v", err)
			}
			cStart := tl.await(t, crashTTL+crashGrace, 0, "child", "start", key)
			aStop, _ := tl.next(0, "A", "stop", key)
			releases := a.st.Releases()
			if len(releases) != 1 {
				t.Fatalf("A called Release %d times, want once", len(releases))
			}
			latency := cStart.at.Sub(releases[0])
			t.Logf("A's Release call → the child's runner started: %v (rounds every %v)", latency, crashRenew)

			if !aStop.at.Before(cStart.at) {
				t.Errorf("the child started %v before A's runner stopped", aStop.at.Sub(cStart.at))
			}
			if cStart.epoch <= aStart.epoch {
				t.Errorf("the child's epoch %d is not greater than A's %d", cStart.epoch, aStart.epoch)
			}
			if latency > c.bound {
				t.Errorf("the child started %v after A released, want within %v", latency, c.bound)
			}
		})
	}
}
