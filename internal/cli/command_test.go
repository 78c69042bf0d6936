package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

// jamHandler is a log sink that can jam, as stderr does when it is a pipe
// nobody reads: once jammed, every call blocks until it is released. It
// reports the pid of every "command started" record.
type jamHandler struct {
	attrs   []slog.Attr
	started chan<- int
	jammed  <-chan struct{}
	release <-chan struct{}
}

func (h *jamHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *jamHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case <-h.jammed:
		<-h.release
		return nil
	default:
	}
	if r.Message == "command started" {
		for _, a := range h.attrs {
			if a.Key == "pid" {
				h.started <- int(a.Value.Int64())
			}
		}
	}
	return nil
}

func (h *jamHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *jamHandler) WithGroup(string) slog.Handler { return h }

func TestACommandIsSignalledToStopEvenWhenLoggingBlocks(t *testing.T) {
	started := make(chan int, 1)
	jam, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unjam := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unjam)
	log := slog.New(&jamHandler{started: started, jammed: jam, release: release})
	r, err := newCommandRunner([]string{"sleep", "60"}, false, 5*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	returned := make(chan error, 1)
	go func() { returned <- r.Run(ctx, tenure.Lease{Key: "jam", Epoch: 1, Owner: "me"}) }()
	var pid int
	select {
	case pid = <-started:
	case err := <-returned:
		t.Fatalf("Run returned %v before the command started", err)
	}
	close(jam)
	cancel()
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
		if time.Now().After(deadline) {
			unjam()
			<-returned
			t.Fatal("the command still runs 3s after the runner was cancelled: stopping it waited on the jammed log")
		}
		time.Sleep(5 * time.Millisecond)
	}
	unjam()
	if err := <-returned; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// isZombie reports whether pid has exited and awaits its parent's wait.
func isZombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}
