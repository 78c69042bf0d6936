package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A log handler that blocks (a full stderr pipe, a stuck log shipper) must
// not keep a runner going past its safety deadline: the deadline path
// cancels first and never waits on logging or on the supervisor's lock.
func TestAStalledLogSinkNeverDelaysTheDeadlineStop(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		runs := &runLog{}
		cut := &partition{Store: st}
		a := newReplica(t, cut, "A", withLogger(g.logger()))
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: runs.runner("B")})
		b.start()
		defer func() {
			g.open()
			a.stop()
			b.stop()
		}()

		advance(renew) // A's renewal at this moment is the last one confirmed
		confirmed := time.Now()
		g.stall()
		cut.cut.Store(true)
		advance(ttl + grace + renew)

		wantNoOverlap(t, runs)
		got := runs.of("telegram")
		if len(got) != 2 || got[0].replica != "A" || got[1].replica != "B" {
			t.Fatalf("runs of telegram: %+v, want A's then B's", got)
		}
		if want := confirmed.Add(ttl - renew); !got[0].ended.Equal(want) || !errors.Is(got[0].cause, tenure.ErrDeadline) {
			t.Fatalf("A's runner stopped at %v with %v, want at %v with ErrDeadline", got[0].ended.Sub(confirmed), got[0].cause, want.Sub(confirmed))
		}
		if earliest := confirmed.Add(ttl + grace); got[1].began.Before(earliest) {
			t.Fatalf("B started %v after A's last renewal, before TTL + grace", got[1].began.Sub(confirmed))
		}
	})
}

// Lease.StopAt lets a runner hand its deadline to work the supervisor
// cannot cancel itself (a child process): it names the moment the context
// is cancelled and signals every confirmed renewal that moves it.
func TestStopAtFollowsEveryConfirmedRenewal(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		leases := make(chan tenure.Lease, 2)
		a := newReplica(t, st, "A")
		runner := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			leases <- l
			<-ctx.Done()
			return nil
		})
		a.Set("telegram", tenure.Job{Runner: runner})
		a.Set("github", tenure.Job{Runner: runner, Mode: tenure.Everywhere})
		granted := time.Now()
		a.start()
		defer a.stop()
		var exclusive, everywhere tenure.Lease
		for range 2 {
			l := <-leases
			if l.Key == "telegram" {
				exclusive = l
			} else {
				everywhere = l
			}
		}
		if _, _, ok := everywhere.StopAt(); ok {
			t.Fatal("an Everywhere run has a lease deadline")
		}
		at, changed, ok := exclusive.StopAt()
		if !ok || !at.Equal(granted.Add(ttl-renew)) {
			t.Fatalf("StopAt = %v, %v; want grant + TTL - RenewEvery", at.Sub(granted), ok)
		}
		advance(renew)
		select {
		case <-changed:
		default:
			t.Fatal("a confirmed renewal did not signal a new StopAt")
		}
		if at, _, _ := exclusive.StopAt(); !at.Equal(granted.Add(renew + ttl - renew)) {
			t.Fatalf("after the renewal StopAt = %v, want renewal + TTL - RenewEvery", at.Sub(granted))
		}
		st.SetFault(func(string) error { return errors.New("unreachable") })
		at, changed, _ = exclusive.StopAt()
		advance(time.Until(at))
		select {
		case <-changed:
		default:
			t.Fatal("the deadline stop did not signal")
		}
		if _, ok := a.running()["telegram"]; ok {
			t.Fatal("telegram still runs after its StopAt")
		}
		if _, _, ok := exclusive.StopAt(); ok {
			t.Fatal("StopAt of a stopped run still reports a deadline")
		}
	})
}

// A store that answers every call, just under CallTimeout, must not make a
// holder lose its work: renewals keep their own schedule and are never
// queued behind acquisitions or reads of the lease table.
func TestASlowButAnsweringStoreNeverStarvesRenewals(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		const latency = 3500 * time.Millisecond // CallTimeout is renew/2 = 5s
		st.SetFault(func(string) error {
			time.Sleep(latency)
			return nil
		})
		runs := &runLog{}
		a := newReplica(t, st, "A")
		for i := range 12 {
			a.Set(fmt.Sprintf("job-%02d", i), tenure.Job{Runner: runs.runner("A")})
		}
		if err := a.AddPool(tenure.Pool{Name: "mail", Source: tenure.StaticKeys(poolKeys(40)...), Runner: runs.runner("A")}); err != nil {
			t.Fatal(err)
		}
		a.start()
		defer a.stop()
		advance(20 * time.Minute)

		for i := range 12 {
			key := fmt.Sprintf("job-%02d", i)
			got := runs.of(key)
			if len(got) != 1 || !got[0].ended.IsZero() {
				t.Errorf("%s ran %d times, the first stopped by %v; want one run, never stopped", key, len(got), firstCause(got))
			}
		}
		stopped := 0
		for _, key := range poolKeys(40) {
			for _, r := range runs.of(key) {
				if errors.Is(r.cause, tenure.ErrDeadline) {
					stopped++
				}
			}
		}
		if stopped > 0 {
			t.Errorf("%d pool runs were stopped at their deadline by a store that answered every call", stopped)
		}
	})
}

func firstCause(runs []run) error {
	if len(runs) == 0 {
		return nil
	}
	return runs[0].cause
}

// One renewal that times out is tried again at once, so a single slow call
// does not cost the runner its lease.
func TestOneUnconfirmedRenewalIsRetriedBeforeItCostsTheRunner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &runLog{}
		a := newReplica(t, st, "A")
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer a.stop()
		var once sync.Once
		st.SetFault(func(op string) error {
			fail := false
			if op == memstore.OpRenew {
				once.Do(func() { fail = true })
			}
			if fail {
				time.Sleep(renew) // outlasts CallTimeout: unconfirmed
			}
			return nil
		})
		advance(5 * renew)
		if got := runs.of("telegram"); len(got) != 1 || !got[0].ended.IsZero() {
			t.Fatalf("runs of telegram %+v: one timed-out renewal stopped the runner", got)
		}
	})
}

// A host suspend (a closed laptop lid, a paused VM) stops no clock on the
// store's host: the lease expired there while this one slept. On resume,
// a runner whose deadline passed meanwhile stops at once, not a whole
// timer later, since deadlines are measured on a clock that counts sleep.
func TestAHostSuspendStopsRunnersAtOnceOnResume(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var slept atomic.Int64
		runs := &runLog{}
		a := newReplica(t, st, "A")
		tenure.StageSuspend(a.Supervisor, func() time.Duration { return time.Duration(slept.Load()) })
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer a.stop()
		advance(renew + time.Second)
		slept.Store(int64(time.Hour)) // the host slept an hour and resumes now
		resumed := time.Now()
		advance(time.Second)
		got := runs.of("telegram")
		if len(got) == 0 || got[0].ended.IsZero() {
			t.Fatalf("runs %+v: the runner outlived a deadline that passed while the host slept", got)
		}
		// (A new term may follow at once: this store, on the same fake
		// clock, still shows A's lease, and A may start a new term of it.)
		if d := got[0].ended.Sub(resumed); d > 250*time.Millisecond || !errors.Is(got[0].cause, tenure.ErrDeadline) {
			t.Fatalf("the runner stopped %v after the resume with %v, want within 250ms with ErrDeadline", d, got[0].cause)
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
