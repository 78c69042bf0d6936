package child

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

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
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	lease := newFakeLease(time.Now().Add(time.Minute))
	first, _, _ := lease.StopAt()
	p, err := Start(Command{Path: sleep, Args: []string{"60"}, Stdout: os.Stdout, Stderr: os.Stderr,
		Deadline: first, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	forwarded := make(chan time.Time, 1)
	go func() {
		forwarded <- ForwardStopAt(lease, p, first, slog.New(slog.DiscardHandler))
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
		t.Errorf("ForwardStopAt returned %v, want the last deadline it sent, %v", got, soon)
	}
}

func TestAfterTheGuardsStopARestartWaitsForAConfirmedRenewal(t *testing.T) {
	enforced := time.Now()
	lease := newFakeLease(enforced)
	renewed := make(chan bool, 1)
	go func() { renewed <- AwaitRenewal(t.Context(), lease, enforced) }()
	select {
	case r := <-renewed:
		t.Fatalf("AwaitRenewal = %v before any renewal", r)
	case <-time.After(100 * time.Millisecond):
	}
	lease.renew(enforced.Add(time.Second))
	if !<-renewed {
		t.Error("AwaitRenewal = false after a renewal moved the deadline on")
	}
}

func TestAfterTheGuardsStopAStoppedRunIsNotRestarted(t *testing.T) {
	enforced := time.Now()
	lease := newFakeLease(enforced)
	ctx, cancel := context.WithCancel(t.Context())
	renewed := make(chan bool, 1)
	go func() { renewed <- AwaitRenewal(ctx, lease, enforced) }()
	lease.stop(cancel)
	if <-renewed {
		t.Error("AwaitRenewal = true for a run that was stopped")
	}
}
