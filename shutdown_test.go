package tenure_test

// Shutdown hands over: every lease is released or left to expire, never
// orphaned, and renewals go on while runners wind down.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// Graceful handoff on shutdown: every lease is released so a peer takes
// it at once. EnsureRunning (or Restart) called while Run is shutting down
// — an HTTP "ensure ready" probe racing a deploy — must not start a new
// term that nobody releases, leaving the peer to wait for TTL + grace.
func TestEnsureRunningDuringShutdownLeavesNoLeaseBehind(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()
		advance(time.Second)
		st.SetFault(func(op string) error {
			if op == memstore.OpRelease {
				time.Sleep(time.Second) // a store round trip on shutdown
			}
			return nil
		})
		a.cancel() // shutdown: the runner stops, the release is on its way
		synctest.Wait()
		running, err := a.EnsureRunning(context.Background(), "telegram")
		t.Logf("EnsureRunning during shutdown: %v, %v", running, err)
		if err := <-a.done; err != nil {
			t.Fatal(err)
		}
		st.SetFault(nil)
		stopped := time.Now()
		advance(time.Second)
		if l := lease(t, st, "telegram"); l.Live && l.Owner == a.Owner() {
			t.Errorf("after A's Run returned the store shows A's live term %d: %+v", l.Epoch, l)
		}
		if got := b.rec.startsOf("telegram"); len(got) != 1 || got[0].at.Sub(stopped) > time.Second {
			t.Fatalf("B started telegram %v after A shut down, want at once", got)
		}
	})
}

// Renewals go on while a shutdown waits for runners to return: a runner
// that takes longer than its lease's remaining life to wind down keeps the
// key to itself until it returns and the lease is released (within
// StopTimeout), rather than letting it expire under a peer.
func TestLeasesStayRenewedWhileAShutdownWaitsForRunners(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &runLog{}
		windDown := 45 * time.Second // longer than TTL + grace
		slow := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			err := runs.runner("A").Run(ctx, l)
			time.Sleep(windDown) // flushing, closing connections…
			return err
		})
		a := newReplica(t, st, "A", func(c *tenure.Config) { c.StopTimeout = time.Minute })
		a.Set("telegram", tenure.Job{Runner: slow})
		a.start()
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: runs.runner("B")})
		b.start()
		defer b.stop()
		advance(renew)
		stopped := make(chan error, 1)
		go func() { stopped <- a.stop() }()
		advance(windDown + renew)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		// runLog ends A's run when its context ends; the work went on for
		// windDown more, so B must not have started before that.
		got := runs.of("telegram")
		if len(got) != 2 || got[1].replica != "B" {
			t.Fatalf("runs %+v, want A's then B's", got)
		}
		if returned := got[0].ended.Add(windDown); got[1].began.Before(returned) {
			t.Fatalf("B started %v before A's runner returned", returned.Sub(got[1].began))
		}
	})
}

// heldRelease is a store whose Release waits for a gate before it commits,
// as a slow network or a busy database would make it.
type heldRelease struct {
	store.Store
	gate    chan struct{}
	waiting atomic.Bool
}

func (h *heldRelease) Release(ctx context.Context, owner string, terms []store.Term) error {
	h.waiting.Store(true)
	select {
	case <-h.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Store.Release(ctx, owner, terms)
}

// A key enabled again while the release of its lease is in flight must not
// start a runner on the term being released: once the release commits, a
// peer starts at once, beside a runner that is only then told to stop.
func TestAKeyEnabledAgainWhileItsLeaseIsBeingReleasedNeverRunsBesideThePeer(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		type span struct {
			who        string
			begin, end time.Time
		}
		var mu sync.Mutex
		var spans []*span
		slowStop := func(who string) tenure.Runner {
			return tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
				sp := &span{who: who, begin: time.Now()}
				mu.Lock()
				spans = append(spans, sp)
				mu.Unlock()
				<-ctx.Done()
				time.Sleep(time.Second) // winding down takes a moment
				mu.Lock()
				sp.end = time.Now()
				mu.Unlock()
				return nil
			})
		}
		held := &heldRelease{Store: st, gate: make(chan struct{})}
		a := newReplica(t, held, "A")
		if err := a.Set("k", tenure.Job{Runner: slowStop("A")}); err != nil {
			t.Fatal(err)
		}
		a.start()
		defer a.stop()
		advance(time.Second)
		b := newReplica(t, st, "B")
		if err := b.Set("k", tenure.Job{Runner: slowStop("B")}); err != nil {
			t.Fatal(err)
		}
		b.start()
		defer b.stop()

		if err := a.SetEnabled("k", false); err != nil {
			t.Fatal(err)
		}
		advance(1500 * time.Millisecond) // A's runner has returned; its release waits
		if !held.waiting.Load() {
			t.Fatal("A's release is not in flight; the test proves nothing")
		}
		if err := a.SetEnabled("k", true); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		close(held.gate)
		advance(5 * time.Second)

		mu.Lock()
		defer mu.Unlock()
		for i, x := range spans {
			for _, y := range spans[i+1:] {
				if x.who == y.who {
					continue
				}
				if (x.end.IsZero() || y.begin.Before(x.end)) && (y.end.IsZero() || x.begin.Before(y.end)) {
					t.Errorf("%s ran %v–%v beside %s %v–%v", x.who, x.begin, x.end, y.who, y.begin, y.end)
				}
			}
		}
		if len(spans) < 2 {
			t.Errorf("%d runs; want the first run and a second one after the release", len(spans))
		}
	})
}

// TestAGracefulStopKeepsTheDeadlineMovingUntilTheRunnerReturns: while a
// runner winds down after a graceful stop, the lease is still renewed, so
// its StopAt keeps moving — a command it handed on (tenure run's child)
// is not cut short by a deadline the lease has moved past. Before, StopAt
// froze at the stop and the guard killed a slow-stopping command there.
func TestAGracefulStopKeepsTheDeadlineMovingUntilTheRunnerReturns(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A", func(c *tenure.Config) { c.StopTimeout = 3 * ttl })
		type seen struct {
			at time.Time
			ok bool
		}
		atStop, beforeReturn := make(chan seen, 1), make(chan seen, 1)
		var lease tenure.Lease
		a.Set("slow", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			lease = l
			<-ctx.Done()
			at, _, ok := l.StopAt()
			atStop <- seen{at, ok}
			time.Sleep(2 * ttl) // a command slow to stop, renewals going on
			at, _, ok = l.StopAt()
			beforeReturn <- seen{at, ok}
			return nil
		})})
		a.start()
		advance(renew)
		stopped := make(chan error, 1)
		go func() { stopped <- a.stop() }()
		first := <-atStop
		last := <-beforeReturn
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if !first.ok || !last.ok || !last.at.After(first.at.Add(ttl)) {
			t.Fatalf("StopAt at the stop %v (ok %v), before the return %v (ok %v); want it to keep moving with the renewals", first.at, first.ok, last.at, last.ok)
		}
		if _, _, ok := lease.StopAt(); ok {
			t.Fatal("StopAt still ok after the runner returned")
		}
	})
}
