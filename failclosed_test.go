package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A log handler that blocks (a full stderr pipe, a stuck log shipper) must
// not keep a runner going past its safety deadline: the deadline path
// cancels first and never waits on logging or on the supervisor's lock.
func TestAStalledLogSinkNeverDelaysTheDeadlineStop(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &testenv.Partition{Store: st}
		g, runs, _, stop := aWithAStallableLog(t, cut, st)
		defer stop()

		advance(renew) // A's renewal at this moment is the last one confirmed
		confirmed := time.Now()
		g.stall()
		cut.Cut.Store(true)
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

// A replica whose host once slept (its deadline clock runs ahead of
// time.Now by the time slept) must still take over a crashed peer's key at
// expiry + grace: the retry time of a refused acquisition is on the
// keeper's clock and must not be compared with time.Now, or every retry
// is pushed back by the whole time the host ever slept.
func TestAReplicaWhoseHostOnceSleptTakesOverAtExpiryPlusGrace(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &testenv.Partition{Store: st}
		a := newReplica(t, cut, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		defer a.stop()
		advance(3 * time.Second)
		b := newReplica(t, st, "B")
		tenure.StageSuspend(b.Supervisor, func() time.Duration { return time.Hour }) // slept an hour before this test
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()

		advance(renew)
		lastRenewal := time.Now().Add(-3 * time.Second)
		cut.Cut.Store(true) // A crashes
		advance(ttl + grace + renew)
		got := b.rec.startsOf("telegram")
		if len(got) != 1 {
			t.Fatalf("B started telegram %d times in TTL + grace + RenewEvery after A's crash, want once", len(got))
		}
		if took := got[0].at.Sub(lastRenewal); took != ttl+grace {
			t.Fatalf("B took over %v after A's last renewal, want TTL + grace = %v", took, ttl+grace)
		}
	})
}

// The suspend path is a deadline path: on resume, runners whose deadline
// passed while the host slept stop at once, and — like the watchdog — it
// must not wait on a log handler first (doc.go: a blocked log handler
// cannot delay the cancellation).
func TestAStalledLogSinkNeverDelaysTheStopAfterAHostSuspend(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		var slept atomic.Int64
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()))
		tenure.StageSuspend(a.Supervisor, func() time.Duration { return time.Duration(slept.Load()) })
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		advance(renew + time.Second)
		g.stall()
		slept.Store(int64(time.Hour)) // the host slept an hour and resumes now
		resumed := time.Now()
		advance(time.Second)
		got := runs.of("telegram")
		if len(got) == 0 || got[0].ended.IsZero() {
			t.Fatalf("runs %+v: with the log sink stalled, the runner outlived a deadline that passed while the host slept", got)
		}
		if d := got[0].ended.Sub(resumed); d > 250*time.Millisecond || !errors.Is(got[0].cause, tenure.ErrDeadline) {
			t.Fatalf("the runner stopped %v after the resume with %v, want within 250ms with ErrDeadline", d, got[0].cause)
		}
	})
}

// A renewal the store refuses stops the runner at once (doc.go: "lost ...
// the runner stops at once") — every refused key's runner, not only the
// first: one key's "lease lost" log line, written to a stalled sink, must
// not keep the next lost key's runner going until its deadline while the
// peer that took it already runs.
func TestEveryLeaseLostInOneRenewalStopsAtOnceWhateverTheLogSinkDoes(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()))
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.Set("discord", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		advance(renew / 2)
		g.stall()
		// The table cannot be read (so the supervision loop, which logs
		// that, is no help), and both keys now belong to B: the store lost
		// A's terms and B took them.
		for _, key := range []string{"telegram", "discord"} {
			old := lease(t, st, key)
			st.Put(store.Lease{Key: key, Owner: "B", Epoch: old.Epoch + 1, TimeLeft: ttl})
		}
		st.SetFault(func(op string) error {
			if op == memstore.OpList {
				return errors.New("connection reset")
			}
			return nil
		})
		advance(renew/2 + time.Second) // A's renewal at RenewEvery is refused for both
		for _, key := range []string{"telegram", "discord"} {
			got := runs.of(key)
			if len(got) != 1 || got[0].ended.IsZero() || !errors.Is(got[0].cause, tenure.ErrLeaseLost) {
				t.Errorf("%s: runs %+v; want its one run stopped with ErrLeaseLost at the refused renewal", key, got)
			}
		}
	})
}

// stalledObserver is an Observer whose RunnerStarted blocks while stalled,
// like one that writes to a stuck metrics pipeline.
type stalledObserver struct {
	tenure.NopObserver
	stalled atomic.Bool
	release chan struct{}
}

func (o *stalledObserver) RunnerStarted(bool) {
	if o.stalled.Load() {
		<-o.release
	}
}

// An Observer is user code: one that blocks must not hold the
// supervisor's lock, or the runner of a lease lost meanwhile keeps
// running until its deadline while the peer that took it already runs.
// (With RunnerStarted called under the lock, this test hangs: the refused
// renewal waits for the lock the stalled start holds.)
func TestAStalledObserverNeverDelaysStoppingALostLeasesRunner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		obs := &stalledObserver{release: make(chan struct{})}
		runs := &runLog{}
		a := newReplica(t, st, "A", func(c *tenure.Config) { c.Observer = obs })
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			close(obs.release)
			a.stop()
		}()
		advance(renew / 2)
		obs.stalled.Store(true)
		a.Set("discord", tenure.Job{Runner: runs.runner("A")}) // its start meets the stalled observer
		synctest.Wait()
		old := lease(t, st, "telegram")
		st.Put(store.Lease{Key: "telegram", Owner: "B", Epoch: old.Epoch + 1, TimeLeft: ttl})
		advance(renew/2 + time.Second) // A's renewal at RenewEvery is refused for telegram
		got := runs.of("telegram")
		if len(got) != 1 || got[0].ended.IsZero() || !errors.Is(got[0].cause, tenure.ErrLeaseLost) {
			t.Errorf("telegram: runs %+v; want its one run stopped with ErrLeaseLost at the refused renewal", got)
		}
	})
}

// With renewals far more frequent than the TTL, a runner's watchdog is
// set once and left alone while renewals move its deadline later; when
// renewals stop it fires early, finds the lease renewed and is set again.
// That must stop the runner neither before the last renewal's StopAt nor
// after it, with the supervision loop (the other path that stops a run
// past its deadline) stuck on a stalled log.
func TestAWatchdogSetBeforeManyRenewalsStopsAtTheLastStopAt(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		const every = 2 * time.Second // 14 renewals to a deadline of TTL - every
		var g gate
		runner, leases, stopped := leaseRunner()
		a := newReplica(t, st, "A", withLogger(g.logger()), func(c *tenure.Config) { c.RenewEvery = every })
		a.Set("telegram", tenure.Job{Runner: runner})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		l := <-leases
		first, _, _ := l.StopAt()
		advance(5*every + time.Second) // five renewals, each moving StopAt later
		g.stall()
		st.SetFault(func(string) error { return errors.New("unreachable") })
		at, _, ok := l.StopAt()
		if !ok || !at.After(first.Add(4*every)) {
			t.Fatalf("StopAt after five renewals = first %+v, %v; the renewals did not move it", at.Sub(first), ok)
		}
		advance(time.Until(at) - time.Millisecond)
		select {
		case err := <-stopped:
			t.Fatalf("the runner stopped %v before its StopAt: %v", time.Until(at), err)
		default:
		}
		advance(time.Millisecond)
		select {
		case err := <-stopped:
			if !errors.Is(err, tenure.ErrDeadline) {
				t.Fatalf("stopped with %v, want ErrDeadline", err)
			}
		default:
			t.Fatal("the runner still runs at its StopAt")
		}
	})
}

// StopAt's channel is made only when StopAt hands it out; a runner winding
// down after a graceful stop must still be woken by every renewal that
// moves its deadline, and when it returns.
func TestStopAtKeepsSignallingThroughAGracefulStop(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		leases := make(chan tenure.Lease, 1)
		release := make(chan struct{})
		a := newReplica(t, st, "A")
		a.Set("telegram", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			leases <- l
			<-ctx.Done()
			<-release
			return nil
		})})
		a.start()
		defer a.stop()
		l := <-leases
		advance(3 * renew)
		go func() { _ = a.Remove(context.Background(), "telegram") }()
		advance(time.Millisecond)
		before, changed, ok := l.StopAt()
		if !ok {
			t.Fatal("StopAt reports no deadline while the runner winds down")
		}
		advance(renew)
		select {
		case <-changed:
		default:
			t.Fatal("a renewal during the graceful stop did not signal")
		}
		after, changed, ok := l.StopAt()
		if !ok || !after.After(before) {
			t.Fatalf("StopAt moved by %v (ok %v); want later after a renewal", after.Sub(before), ok)
		}
		close(release)
		advance(time.Millisecond)
		select {
		case <-changed:
		default:
			t.Fatal("the runner's return did not signal")
		}
		if _, _, ok := l.StopAt(); ok {
			t.Fatal("StopAt still reports a deadline after the runner returned")
		}
	})
}

// leaseRunner is a runner for one run that hands out its Lease when it
// starts and its context's cause when it is stopped.
func leaseRunner() (tenure.Runner, <-chan tenure.Lease, <-chan error) {
	leases, stopped := make(chan tenure.Lease, 1), make(chan error, 1)
	return tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		leases <- l
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil
	}), leases, stopped
}

// The watchdogs of every run share one timer, and the runs due at one
// moment are stopped, then reported, by one goroutine. A report that
// blocks (a stalled log sink) must hold up no deadline: here the stop of
// first and of its twin, due at the same moment, is reported into a
// stalled sink, and both must stop on time, and so must a second key,
// acquired half a period later and so due half a period later.
func TestAStalledDeadlineReportNeverDelaysALaterDeadline(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		runs := &runLog{}
		cut := &testenv.Partition{Store: st}
		a := newReplica(t, cut, "A", withLogger(g.logger()))
		a.Set("first", tenure.Job{Runner: runs.runner("A")})
		a.Set("twin", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()

		advance(renew) // the last renewal of first and twin that is confirmed
		confirmed := time.Now()
		advance(renew / 2)
		a.Set("second", tenure.Job{Runner: runs.runner("A")})
		synctest.Wait()
		acquired := time.Now()
		g.stall()
		cut.Cut.Store(true)
		advance(ttl)

		for _, key := range []string{"first", "twin", "second"} {
			if got := runs.of(key); len(got) != 1 {
				t.Fatalf("runs of %s: %+v; want one", key, got)
			}
		}
		for _, key := range []string{"first", "twin"} {
			got := runs.of(key)[0]
			if want := confirmed.Add(ttl - renew); !got.ended.Equal(want) || !errors.Is(got.cause, tenure.ErrDeadline) {
				t.Errorf("%s stopped %v after its last renewal with %v, want %v with ErrDeadline", key, got.ended.Sub(confirmed), got.cause, want.Sub(confirmed))
			}
		}
		second := runs.of("second")
		if want := acquired.Add(ttl - renew); !second[0].ended.Equal(want) || !errors.Is(second[0].cause, tenure.ErrDeadline) {
			t.Errorf("second stopped %v after it was acquired with %v, want %v with ErrDeadline", second[0].ended.Sub(acquired), second[0].cause, want.Sub(acquired))
		}
	})
}
