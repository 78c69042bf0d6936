package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestASlowStartNeverDelaysAnotherKeysRenewal(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A")
		gate := make(chan struct{})
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.Set("discord", tenure.Job{Reload: func(ctx context.Context, key string) (tenure.Runner, error) {
			<-gate // a start that hangs (a slow login)
			return a.rec.runner("d"), nil
		}})
		a.start()
		defer a.stop()

		before := lease(t, st, "telegram")
		advance(renew)
		after := lease(t, st, "telegram")
		if after.TimeLeft != ttl || before.TimeLeft != ttl {
			t.Fatalf("telegram not renewed while discord's start hangs: time left %v → %v", before.TimeLeft, after.TimeLeft)
		}
		wantRunning(t, "A", a, "telegram")
		close(gate)
		advance(0)
		wantRunning(t, "A", a, "telegram", "discord")
	})
}

func TestAHolderThatCannotStartBacksOff(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var attempts atomic.Int32
		fail := atomic.Bool{}
		fail.Store(true)
		a := newReplica(t, st, "A")
		a.Set("telegram", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			attempts.Add(1)
			if fail.Load() {
				return errors.New("bad token")
			}
			<-ctx.Done()
			return nil
		})})
		a.start()
		defer a.stop()
		if n := attempts.Load(); n != 1 {
			t.Fatalf("%d attempts at start, want 1", n)
		}
		if s := a.KeyStatus("telegram"); s.Running || !strings.Contains(s.LastError, "bad token") {
			t.Fatalf("status %+v, want not running with the error", s)
		}
		// Backoff starts at RenewEvery and doubles: attempts at 0, 10, 30, 70s.
		advance(renew - time.Millisecond)
		if n := attempts.Load(); n != 1 {
			t.Fatalf("%d attempts inside the first backoff window", n)
		}
		advance(time.Millisecond)
		if n := attempts.Load(); n != 2 {
			t.Fatalf("%d attempts after the first backoff, want 2", n)
		}
		advance(2*renew - time.Millisecond)
		if n := attempts.Load(); n != 2 {
			t.Fatalf("%d attempts inside the doubled window", n)
		}
		fail.Store(false)
		advance(time.Millisecond)
		if n := attempts.Load(); n != 3 || !a.KeyStatus("telegram").Running {
			t.Fatalf("%d attempts, running %v; want the third to succeed", n, a.KeyStatus("telegram").Running)
		}
		// The lease was held throughout: backing off never gave it up.
		if l := lease(t, st, "telegram"); tenure.OwnerName(l.Owner) != "A" || l.Epoch != 1 {
			t.Fatalf("lease %+v, want A's first term kept", l)
		}
	})
}

func TestReconfiguringTheHolderRestartsItsRunnerUnderTheSameTerm(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		defer a.stop()
		if err := a.Set("telegram", tenure.Job{Runner: a.rec.runner("telegram-2")}); err != nil {
			t.Fatal(err)
		}
		advance(0)
		got := a.rec.startsOf("telegram")
		if len(got) != 2 || got[1].config != "telegram-2" || got[1].epoch != got[0].epoch {
			t.Fatalf("starts %+v, want a restart with the new config under epoch %d", got, got[0].epoch)
		}
		ok, err := a.Restart(context.Background(), "telegram")
		advance(0)
		if !ok || err != nil || len(a.rec.startsOf("telegram")) != 3 {
			t.Fatalf("Restart on the holder: %v, %v, %d starts", ok, err, len(a.rec.startsOf("telegram")))
		}
	})
}

func TestAPanickingRunnerIsRestartedWithoutHarmingOtherKeys(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A")
		a.Set("discord", tenure.Job{Runner: a.rec.runner("d")})
		a.Set("telegram", tenure.Job{Runner: tenure.RunnerFunc(func(context.Context, tenure.Lease) error {
			panic("nil map")
		})})
		a.start()
		defer a.stop()
		advance(renew)
		wantRunning(t, "A", a, "discord")
		if s := a.KeyStatus("telegram"); !strings.Contains(s.LastError, "panicked") {
			t.Fatalf("status %+v, want the panic recorded", s)
		}
	})
}

func TestAKeyThatFailedOnceAndThenLostItsLeaseDoesNotSpin(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var calls atomic.Int32
		a := newReplica(t, st, "A")
		a.Set("telegram", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			if calls.Add(1) == 1 {
				return errors.New("first start fails")
			}
			<-ctx.Done()
			return nil
		})})
		a.start()
		defer a.stop()
		advance(renew) // the backoff has passed: the second start succeeds
		if !a.KeyStatus("telegram").Running {
			t.Fatal("not running after the backoff")
		}
		old := lease(t, st, "telegram")
		st.Put(store.Lease{Key: "telegram", Owner: "B", Epoch: old.Epoch + 1, TimeLeft: ttl})
		// A busy loop would keep the bubble from ever going idle: advance
		// would never return and the test would time out.
		advance(3 * renew)
		if a.KeyStatus("telegram").Running || calls.Load() != 2 {
			t.Fatalf("after the loss: running %v, %d starts", a.KeyStatus("telegram").Running, calls.Load())
		}
	})
}

func TestARunnerThatReturnsErrDoneReleasesItsLeaseAndIsNotRestarted(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var calls atomic.Int32
		a := newReplica(t, st, "A")
		a.Set("nightly-report", tenure.Job{Runner: tenure.RunnerFunc(func(context.Context, tenure.Lease) error {
			calls.Add(1)
			return fmt.Errorf("report sent: %w", tenure.ErrDone)
		})})
		a.start()
		defer a.stop()
		advance(3 * renew)
		if n := calls.Load(); n != 1 {
			t.Fatalf("ran %d times, want once", n)
		}
		if l := lease(t, st, "nightly-report"); !l.Released {
			t.Fatalf("lease after ErrDone: %+v, want released", l)
		}
		if s := a.KeyStatus("nightly-report"); s.Running || s.LastError != "" {
			t.Fatalf("status %+v", s)
		}
	})
}

// A key removed while its start is in flight (a slow Reload) is forgotten
// as soon as that start is refused, not a whole round later: Remove waits
// only StopTimeout.
func TestRemovingAKeyWhoseStartIsInFlightFinishesWhenTheStartIsRefused(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		reloading := make(chan struct{})
		proceed := make(chan struct{})
		a := newReplica(t, st, "A")
		job := tenure.Job{Reload: func(ctx context.Context, key string) (tenure.Runner, error) {
			close(reloading)
			<-proceed
			return tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error { <-ctx.Done(); return nil }), nil
		}}
		if err := a.Set("k", job); err != nil {
			t.Fatal(err)
		}
		a.start()
		defer a.stop()
		<-reloading
		removed := make(chan error, 1)
		began := time.Now()
		go func() { removed <- a.Remove(context.Background(), "k") }()
		synctest.Wait()
		time.Sleep(time.Second) // the reload takes a moment more
		close(proceed)
		if err := <-removed; err != nil {
			t.Fatalf("Remove: %v after %v", err, time.Since(began))
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("Remove took %v; the refused start should finish it at once", took)
		}
		if l := lease(t, st, "k"); l.Live {
			t.Errorf("lease %+v still live after Remove", l)
		}
	})
}
