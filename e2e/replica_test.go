package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
)

// event is a runner starting or stopping, as the runner itself saw it.
// Times come from time.Now, so they carry the monotonic clock and compare
// exactly within one process.
type event struct {
	who   string // replica name
	kind  string // "start" or "stop"
	key   string
	epoch int64
	at    time.Time
	cause error // for "stop": context.Cause of the runner's ctx
}

// timeline collects the events of every replica of one test.
type timeline struct {
	mu     sync.Mutex
	events []event
}

func (tl *timeline) add(e event) {
	tl.mu.Lock()
	tl.events = append(tl.events, e)
	tl.mu.Unlock()
}

// mark is the number of events so far; pass it to next to see only later ones.
func (tl *timeline) mark() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.events)
}

// next returns the first event at index from or later matching who, kind
// and key.
func (tl *timeline) next(from int, who, kind, key string) (event, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events[min(from, len(tl.events)):] {
		if e.who == who && e.kind == kind && e.key == key {
			return e, true
		}
	}
	return event{}, false
}

// await waits up to timeout for the event next would return.
func (tl *timeline) await(t testing.TB, timeout time.Duration, from int, who, kind, key string) event {
	t.Helper()
	var e event
	waitUntil(t, timeout, fmt.Sprintf("%s's runner of %q to %s", who, key, kind), func() bool {
		var ok bool
		e, ok = tl.next(from, who, kind, key)
		return ok
	})
	return e
}

// runner records its start and stop and otherwise just waits for its
// context, as a well-behaved runner does.
func (tl *timeline) runner(who string) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		tl.add(event{who: who, kind: "start", key: l.Key, epoch: l.Epoch, at: time.Now()})
		<-ctx.Done()
		tl.add(event{who: who, kind: "stop", key: l.Key, epoch: l.Epoch, at: time.Now(), cause: context.Cause(ctx)})
		return nil
	})
}

// waitUntil polls cond every millisecond until it holds, failing the test
// after timeout. Measurements never rely on when this wakes up: they use
// the times recorded by runners and by the partition wrapper.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	pollUntil(t, timeout, time.Millisecond, what, cond)
}

// pollUntil is waitUntil with a chosen interval, for conditions that cost
// enough to disturb what is measured.
func pollUntil(t testing.TB, timeout, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

// replica is one supervisor with its own Store, behind a partition.
type replica struct {
	name string
	sup  *tenure.Supervisor
	st   *partition

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// newReplica makes a supervisor for keys on st, each key running
// runner. cfg's timing fields are used as given; the store, owner and
// logger are filled in. It is stopped when the test ends.
func newReplica(t testing.TB, name string, st store.Store, cfg tenure.Config, runner tenure.Runner, keys ...string) *replica {
	t.Helper()
	p := newPartition(st)
	cfg.Store, cfg.Leases = p, tenure.LeasesOn
	if cfg.Owner == "" {
		cfg.Owner = name + "-" + randomHex(3)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger().With("replica", name)
	}
	sup, err := tenure.New(cfg)
	if err != nil {
		t.Fatalf("tenure.New: %v", err)
	}
	for _, key := range keys {
		if err := sup.Set(key, tenure.Job{Runner: runner}); err != nil {
			t.Fatalf("Set(%q): %v", key, err)
		}
	}
	r := &replica{name: name, sup: sup, st: p}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("replica %s: Run: %v", name, err)
		}
	})
	return r
}

// start runs the supervisor in the background.
func (r *replica) start() *replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r.cancel, r.done = cancel, done
	go func() { done <- r.sup.Run(ctx) }()
	return r
}

// stop cancels Run and waits for it to return (a graceful shutdown); it is
// a no-op when the replica is not running.
func (r *replica) stop() error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	return <-done
}

func testLogger() *slog.Logger {
	if os.Getenv("TENURE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
