package chaos

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
)

func TestAStalledLogBlocksEveryHandlerOfTheLoggerUntilItResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		gate := newLogGate()
		logger := slog.New(gatedHandler{gate: gate, inner: slog.NewTextHandler(&syncWriter{b: &out}, nil)}).
			With("replica", "r1").WithGroup("g")
		gate.set(false)
		done := make(chan struct{})
		go func() {
			defer close(done)
			logger.Warn("stopping runner")
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a record went through a stalled log")
		default:
		}
		if !gate.set(true) || gate.set(true) {
			t.Error("set reports a change only when there was one")
		}
		<-done
		if !strings.Contains(out.String(), "stopping runner") {
			t.Errorf("the record was lost: %q", out.String())
		}
	})
}

type syncWriter struct{ b *strings.Builder }

func (w *syncWriter) Write(p []byte) (int, error) { return w.b.Write(p) }
