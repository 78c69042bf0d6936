package tenure_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

// runLog records every run of every key across replicas — when it began,
// when its context was cancelled and why — so a test can check that no two
// runs of a key overlapped and how early a runner was stopped.
type runLog struct {
	mu   sync.Mutex
	runs []*run
}

type run struct {
	replica string
	key     string
	epoch   int64
	began   time.Time
	ended   time.Time // when ctx was cancelled; zero while running
	cause   error
}

// runner returns a runner that records its runs under the replica's name
// and works until its context is cancelled.
func (l *runLog) runner(replica string) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, lease tenure.Lease) error {
		r := &run{replica: replica, key: lease.Key, epoch: lease.Epoch, began: time.Now()}
		l.mu.Lock()
		l.runs = append(l.runs, r)
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		r.ended, r.cause = time.Now(), context.Cause(ctx)
		l.mu.Unlock()
		return nil
	})
}

// of returns the runs of key, in start order.
func (l *runLog) of(key string) []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []run
	for _, r := range l.runs {
		if r.key == key {
			out = append(out, *r)
		}
	}
	return out
}

// count is how many runs there were in all.
func (l *runLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.runs)
}

// overlaps reports every pair of runs of one key, on different replicas,
// whose lifetimes intersect.
func (l *runLog) overlaps() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, a := range l.runs {
		for _, b := range l.runs[i+1:] {
			if a.key != b.key || a.replica == b.replica {
				continue
			}
			aEnd, bEnd := a.ended, b.ended
			if (aEnd.IsZero() || b.began.Before(aEnd)) && (bEnd.IsZero() || a.began.Before(bEnd)) {
				out = append(out, a.key+": "+a.replica+" and "+b.replica)
			}
		}
	}
	return out
}

// gate is a log sink that can be made to block, like a full stderr pipe or
// a stuck log shipper.
type gate struct {
	mu     sync.Mutex
	closed chan struct{} // non-nil while stalled
}

func (g *gate) stall() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	c := g.closed
	g.mu.Unlock()
	if c != nil {
		<-c
	}
}

func (g *gate) logger() *slog.Logger { return slog.New(&gateHandler{g: g}) }

type gateHandler struct{ g *gate }

func (h *gateHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *gateHandler) Handle(context.Context, slog.Record) error {
	h.g.wait()
	return nil
}
func (h *gateHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *gateHandler) WithGroup(string) slog.Handler      { return h }

func withLogger(l *slog.Logger) replicaOpt { return func(c *tenure.Config) { c.Logger = l } }

// wantNoOverlap fails the test when two replicas ran a key at once.
func wantNoOverlap(t *testing.T, l *runLog) {
	t.Helper()
	if o := l.overlaps(); len(o) > 0 {
		t.Fatalf("a key ran on two replicas at once: %v", o)
	}
}
