package chaos

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
)

// logGate plays the log-stall fault inside a replica. A log sink that
// stops taking records (stderr a full pipe nobody drains, a stuck log
// shipper, a terminal on Ctrl-S) blocks the goroutine that logs, wherever
// it is: the engine must never wait for one on the path that stops a
// runner at its deadline. The gate is driven by signals, which reach a
// replica the same way on every backend.
type logGate struct {
	mu     sync.Mutex
	opened chan struct{} // closed while records pass
}

func newLogGate() *logGate {
	g := &logGate{opened: make(chan struct{})}
	close(g.opened)
	return g
}

// set opens or closes the gate and reports whether that changed it.
func (g *logGate) set(open bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.opened:
		if open {
			return false
		}
		g.opened = make(chan struct{})
		return true
	default:
		if !open {
			return false
		}
		close(g.opened)
		return true
	}
}

// wait blocks while the gate is closed. It ignores every context on
// purpose: a write(2) to a full pipe does not return when a caller's
// context ends.
func (g *logGate) wait() {
	g.mu.Lock()
	ch := g.opened
	g.mu.Unlock()
	<-ch
}

// follow opens and closes the gate on the harness's signals, recording
// each change, until stop is called; it listens once it returns. Only the
// harness ends a stall: a SIGTERM meanwhile finds the gate still closed,
// as a real stuck sink would be.
func (g *logGate) follow(log *eventLog) (stop func()) {
	if !supported {
		return func() {}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, sigStallLog, sigResumeLog)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case s := <-sigs:
				open := s == sigResumeLog
				if g.set(open) {
					log.add(Event{Ev: evLogGate, Outcome: map[bool]string{true: "open", false: "closed"}[open]})
				}
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(quit)
		<-done
	}
}

// gatedHandler is a slog.Handler whose Handle waits at the gate first.
type gatedHandler struct {
	inner slog.Handler
	gate  *logGate
}

func (h gatedHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h gatedHandler) Handle(ctx context.Context, r slog.Record) error {
	h.gate.wait()
	return h.inner.Handle(ctx, r)
}

func (h gatedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return gatedHandler{inner: h.inner.WithAttrs(as), gate: h.gate}
}

func (h gatedHandler) WithGroup(name string) slog.Handler {
	return gatedHandler{inner: h.inner.WithGroup(name), gate: h.gate}
}
