package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// jamWriter is stderr as a pipe nobody reads once jammed: every Write
// blocks until it is released.
type jamWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	jammed  chan struct{} // closed: writes block
	release chan struct{} // closed: writes go through again
}

func (w *jamWriter) Write(p []byte) (int, error) {
	select {
	case <-w.jammed:
		<-w.release
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *jamWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// tenure run whose stderr jams still hands its key over: stopped, the
// command's runner returns and the lease is released, although the
// runner logs as it stops the command (it once waited on that log, so the
// lease was left to expire, or was kept with nothing running on a move).
func TestRunHandsOverWithItsStderrJammed(t *testing.T) {
	stderr := &jamWriter{jammed: make(chan struct{}), release: make(chan struct{})}
	defer close(stderr.release)
	e, _, _ := testEnv(nil)
	e.stderr = stderr
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- e.main(ctx, []string{"run", "--store", "sqlite:" + filepath.Join(t.TempDir(), "l.db"),
			"--key", "jam", "--ttl", "3s", "--stop-timeout", "2s", "--", "sleep", "60"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "command started") {
		if time.Now().After(deadline) {
			t.Fatalf("the command did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stderr.jammed)
	began := time.Now()
	cancel()
	select {
	case code := <-exit:
		// Run ends once the lease is released; what is left of the log
		// then waits for stderr for up to the stop timeout + killWait.
		if code != ExitOK {
			t.Fatalf("exit %d after a stop with stderr jammed, want %d (the lease released)", code, ExitOK)
		}
		if took := time.Since(began); took > 2*time.Second+killWait+5*time.Second {
			t.Errorf("tenure run took %v to end", took)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("tenure run did not end 25s after it was stopped with its stderr jammed")
	}
}
