package tenure_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// The reference suite's timing: lease 30s, grace 10s, so renewals every 10s.
const (
	ttl   = 30 * time.Second
	grace = 10 * time.Second
	renew = ttl / 3
)

// recorder is a runner factory that remembers every start, like the
// reference suite's fake transports.
type recorder struct {
	mu      sync.Mutex
	starts  []start
	running map[string]int
	// failStart makes runs return at once with an error.
	failStart bool
	// ignoreCancel makes runs block until unstick is closed.
	ignoreCancel bool
	unstick      chan struct{}
}

type start struct {
	key    string
	epoch  int64
	config string
	at     time.Time
}

func newRecorder() *recorder {
	return &recorder{running: map[string]int{}, unstick: make(chan struct{})}
}

// runner returns a runner for key whose config label is recorded on start.
func (r *recorder) runner(config string) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		r.mu.Lock()
		fail, stuck := r.failStart, r.ignoreCancel
		if fail {
			r.mu.Unlock()
			return errors.New("could not connect")
		}
		r.starts = append(r.starts, start{key: l.Key, epoch: l.Epoch, config: config, at: time.Now()})
		r.running[l.Key]++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.running[l.Key]--
			r.mu.Unlock()
		}()
		if stuck {
			<-r.unstick
			return nil
		}
		<-ctx.Done()
		return nil
	})
}

func (r *recorder) startsOf(key string) []start {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []start
	for _, s := range r.starts {
		if s.key == key {
			out = append(out, s)
		}
	}
	return out
}

// replica is one supervisor running in the test's bubble.
type replica struct {
	*tenure.Supervisor
	rec    *recorder
	cancel context.CancelFunc
	done   chan error
}

type replicaOpt func(*tenure.Config)

func newReplica(t *testing.T, st store.Store, owner string, opts ...replicaOpt) *replica {
	t.Helper()
	cfg := tenure.Config{
		Store: st, Leases: tenure.LeasesOn, Owner: owner,
		TTL: ttl, Grace: grace, StopTimeout: 5 * time.Second,
		Logger: testLogger(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	sup, err := tenure.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{Supervisor: sup, rec: newRecorder()}
}

// channels configures the reference suite's three keys: two exclusive
// pollers and one webhook receiver that runs everywhere.
func (r *replica) channels(t *testing.T) *replica {
	t.Helper()
	for _, key := range []string{"telegram", "discord"} {
		if err := r.Set(key, tenure.Job{Runner: r.rec.runner(key + "-1")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Set("github", tenure.Job{Runner: r.rec.runner("github"), Mode: tenure.Everywhere}); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs the supervisor and waits until everything it can do at once
// has been done.
func (r *replica) start() *replica {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.Run(ctx) }()
	synctest.Wait()
	return r
}

// stop cancels Run and returns its error.
func (r *replica) stop() error {
	r.cancel()
	return <-r.done
}

func (r *replica) running() map[string]bool {
	out := map[string]bool{}
	for _, st := range r.Status() {
		if st.Configured && st.Running && (!st.Leased || st.LeaderHere) {
			out[st.Key] = true
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func wantRunning(t *testing.T, who string, r *replica, want ...string) {
	t.Helper()
	got := r.running()
	if len(got) != len(want) {
		t.Fatalf("%s runs %v, want %v", who, keys(got), want)
	}
	for _, k := range want {
		if !got[k] {
			t.Fatalf("%s runs %v, want %v", who, keys(got), want)
		}
	}
}

// lease reads key's record straight from the store.
func lease(t *testing.T, st store.Store, key string) store.Lease {
	t.Helper()
	all, err := st.List(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no lease record for %q", key)
	return store.Lease{}
}

// bubble runs f in a synctest bubble with a fresh in-memory store.
func bubble(t *testing.T, f func(t *testing.T, st *memstore.Store)) {
	synctest.Test(t, func(t *testing.T) {
		f(t, memstore.New(memstore.Options{}))
	})
}

// advance lets d pass on the fake clock and lets everything due run.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func testLogger() *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
