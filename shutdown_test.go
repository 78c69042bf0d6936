package tenure_test

// Shutdown hands over: every lease is released or left to expire, never
// orphaned, and renewals go on while runners wind down.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
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
