package cli

import (
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"
)

type blockWriter struct{ ch chan struct{} }

func (b blockWriter) Write(p []byte) (int, error) { <-b.ch; return len(p), nil }

// TestASIGHUPWhoseLogBlocksNeverHoldsUpASIGTERM: stderr is a full pipe,
// so SIGHUP's log line blocks; a SIGTERM after it must still stop at once.
func TestASIGHUPWhoseLogBlocksNeverHoldsUpASIGTERM(t *testing.T) {
	bw := blockWriter{ch: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(bw, nil))
	stopped := make(chan struct{})
	h := &signalHandler{log: log, stop: func() { close(stopped) }, hurry: func() {}}
	h.hangup = func() { log.Info("SIGHUP: nothing to reload") } // what run's hangup does without --pass-sighup
	sigs := make(chan os.Signal, 2)
	done := make(chan struct{})
	handled := make(chan struct{})
	go func() { h.handle(sigs, done); close(handled) }()
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGTERM
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Error("SIGTERM after SIGHUP was not acted on while a log write blocks")
	}
	close(bw.ch) // the pipe drains
	close(done)
	<-handled
}
