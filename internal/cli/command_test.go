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
	"github.com/tenure-dev/tenure/internal/child"
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

// fakeLease is a lease's deadline as a runner sees it, moved or stopped by
// the test as the engine would after a renewal or a stop.
type fakeLease struct {
	mu      sync.Mutex
	at      time.Time
	changed chan struct{}
	stopped bool
}

func newFakeLease(at time.Time) *fakeLease { return &fakeLease{at: at, changed: make(chan struct{})} }

func (l *fakeLease) StopAt() (time.Time, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at, l.changed, !l.stopped
}

// renew moves the deadline to at.
func (l *fakeLease) renew(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = at
	close(l.changed)
	l.changed = make(chan struct{})
}

// stop ends the run as the engine does: ctx is cancelled, then the
// channel is closed and StopAt reports ok=false from then on.
func (l *fakeLease) stop(cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cancel()
	l.stopped = true
	close(l.changed)
}

func TestEachNewDeadlineOfTheLeaseReachesTheGuard(t *testing.T) {
	sleep, err := lookCommand("sleep")
	if err != nil {
		t.Fatal(err)
	}
	lease := newFakeLease(time.Now().Add(time.Minute))
	first, _, _ := lease.StopAt()
	p, err := child.Start(child.Command{Path: sleep, Args: []string{"60"}, Stdout: os.Stdout, Stderr: os.Stderr,
		Deadline: first, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	forwarded := make(chan time.Time, 1)
	go func() {
		forwarded <- forwardStopAt(t.Context(), lease, p, first, slog.New(slog.DiscardHandler))
	}()
	// A deadline moved earlier is as binding as one moved later.
	soon := time.Now().Add(200 * time.Millisecond)
	lease.renew(soon)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		_ = p.Signal(syscall.SIGKILL)
		t.Fatal("the guard did not stop the command at the lease's new deadline")
	}
	if exit, _ := p.Exit(); !exit.Deadline {
		t.Errorf("Exit = %+v, want stopped by the guard at its deadline", exit)
	}
	if late := time.Since(soon); late < 0 {
		t.Errorf("stopped %v before the deadline", -late)
	}
	if got := <-forwarded; !got.Equal(soon) {
		t.Errorf("forwardStopAt returned %v, want the last deadline it sent, %v", got, soon)
	}
}

func TestAfterTheGuardsStopARestartWaitsForAConfirmedRenewal(t *testing.T) {
	enforced := time.Now()
	lease := newFakeLease(enforced)
	renewed := make(chan bool, 1)
	go func() { renewed <- awaitRenewal(t.Context(), lease, enforced) }()
	select {
	case r := <-renewed:
		t.Fatalf("awaitRenewal = %v before any renewal", r)
	case <-time.After(100 * time.Millisecond):
	}
	lease.renew(enforced.Add(time.Second))
	if !<-renewed {
		t.Error("awaitRenewal = false after a renewal moved the deadline on")
	}
}

func TestAfterTheGuardsStopAStoppedRunIsNotRestarted(t *testing.T) {
	enforced := time.Now()
	lease := newFakeLease(enforced)
	ctx, cancel := context.WithCancel(t.Context())
	renewed := make(chan bool, 1)
	go func() { renewed <- awaitRenewal(ctx, lease, enforced) }()
	lease.stop(cancel)
	if <-renewed {
		t.Error("awaitRenewal = true for a run that was stopped")
	}
}
