package child

import (
	"context"
	"log/slog"
	"time"
)

// Lease is what a supervisor learns of the safety deadline of the lease a
// command runs under: tenure.Lease (see its StopAt), or a test's stand-in.
// StopAt reports the deadline, a channel closed when it moves or the run
// stops, and ok=false once the run is stopped or no lease guards it.
type Lease interface {
	StopAt() (at time.Time, changed <-chan struct{}, ok bool)
}

// ForwardStopAt passes each new safety deadline of lease (sent: the one the
// guard has, usually Command.Deadline) to p's guard, until p is gone or the
// deadline stops moving (the lease lost, the run over), and returns the
// last one the guard got. It goes on while the command is being stopped
// gracefully, as the lease is still renewed then: a command slow to stop
// is not cut short by a deadline the lease has long moved past. Everyone
// who runs a command under a lease uses it, so that the guard stops the
// command on time even while the caller is frozen: `tenure run` and the
// fault harness's child work alike.
func ForwardStopAt(lease Lease, p *Process, sent time.Time, log *slog.Logger) time.Time {
	for {
		at, changed, ok := lease.StopAt()
		if !ok {
			return sent // no lease, or the run stopped: nothing moves it any more
		}
		if !at.Equal(sent) {
			if err := p.SetDeadline(at); err != nil {
				// The guard keeps the earlier deadline and stops the
				// command too early, never too late.
				log.Warn("cannot pass the lease's new deadline to the guard", "err", err)
			}
			sent = at
		}
		select {
		case <-changed:
		case <-p.Done():
			return sent
		}
	}
}

// AwaitRenewal waits until a renewal confirmed by the store moves lease's
// deadline past enforced (true), or the run stops (false). After the guard
// stopped a command at its deadline, a peer may hold the key: the command
// may start again only once the lease is confirmed anew.
func AwaitRenewal(ctx context.Context, lease Lease, enforced time.Time) bool {
	for {
		at, changed, ok := lease.StopAt()
		if !ok || at.After(enforced) {
			return ctx.Err() == nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
