package tenure_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A holder whose runner fails after Pause returned must not restart it
// under the same term: every start reads the pause record, not only a new
// term's.
func TestAPausedKeyIsNotRestartedAfterAFailureUnderTheSameTerm(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var starts atomic.Int32
		var pausedAt atomic.Int64
		var startsAfterPause atomic.Int32
		fail := make(chan struct{})
		a := newReplica(t, st, "A", func(c *tenure.Config) { c.BackoffMin = time.Second })
		a.Set("k", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			starts.Add(1)
			if p := pausedAt.Load(); p != 0 {
				startsAfterPause.Add(1)
			}
			select {
			case <-fail:
				return errors.New("boom")
			case <-ctx.Done():
				return nil
			}
		})})
		a.start()
		defer a.stop()
		advance(time.Second)
		if starts.Load() != 1 {
			t.Fatalf("starts %d", starts.Load())
		}
		if err := tenure.Pause(context.Background(), st, "k"); err != nil {
			t.Fatal(err)
		}
		pausedAt.Store(time.Now().UnixNano())
		close(fail) // the runner fails right after the pause
		advance(2 * time.Second)
		if n := startsAfterPause.Load(); n != 0 {
			t.Fatalf("k started %d time(s) after Pause returned (docs: none starts it after the pause)", n)
		}
	})
}

// A pause that lands while a slow Reload hook runs stops the start: the
// record is read after Reload, last thing before the fence.
func TestAPauseThatLandsDuringReloadStopsTheStart(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var started atomic.Int32
		inReload := make(chan struct{})
		release := make(chan struct{})
		a := newReplica(t, st, "A")
		a.Set("k", tenure.Job{Reload: func(ctx context.Context, key string) (tenure.Runner, error) {
			close(inReload)
			<-release
			return tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
				started.Add(1)
				<-ctx.Done()
				return nil
			}), nil
		}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		<-inReload
		if err := tenure.Pause(context.Background(), st, "k"); err != nil {
			t.Fatal(err)
		}
		close(release)
		synctest_wait()
		if started.Load() != 0 {
			t.Errorf("k started after Pause returned (reload was in flight)")
		}
		cancel()
		<-done
	})
}

// An Everywhere key Set on a running supervisor while it is paused does
// not start: Everywhere keys read the pause record too.
func TestAnEverywhereKeySetWhilePausedDoesNotStart(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").start()
		defer a.stop()
		if err := tenure.Pause(context.Background(), st, "hook"); err != nil {
			t.Fatal(err)
		}
		advance(renew + time.Second) // A has read the table with the record
		a.Set("hook", tenure.Job{Runner: a.rec.runner("x"), Mode: tenure.Everywhere})
		advance(time.Second)
		if n := len(a.rec.startsOf("hook")); n != 0 {
			t.Fatalf("paused Everywhere key started %d times", n)
		}
	})
}

var _ = sync.Mutex{}

func synctest_wait() { advance(0) }

// At the default timing, a job that fails 3s into each run — the kind of
// job an operator pauses — is not started again once Pause has returned.
func TestAFailingJobIsNotRestartedAfterPauseAtDefaultTiming(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var pausedAt atomic.Int64
		var after atomic.Int32
		a := newReplica(t, st, "A")
		a.Set("k", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			if pausedAt.Load() != 0 {
				after.Add(1)
			}
			select {
			case <-time.After(3 * time.Second):
				return errors.New("boom")
			case <-ctx.Done():
				return nil
			}
		})})
		a.start()
		defer a.stop()
		advance(renew + time.Second) // t=11s: failed at 3s, retry due at 13s, next round at 20s
		if err := tenure.Pause(context.Background(), st, "k"); err != nil {
			t.Fatal(err)
		}
		pausedAt.Store(1)
		advance(3 * time.Second)
		if n := after.Load(); n != 0 {
			t.Fatalf("k started %d time(s) after Pause returned", n)
		}
	})
}
