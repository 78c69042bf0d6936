package tenure_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// crashLoops counts the crash-loop handovers a supervisor reports.
type crashLoops struct {
	tenure.NopObserver
	n atomic.Int32
}

func (c *crashLoops) Handover(cause string) {
	if cause == tenure.HandoverCrashLoop {
		c.n.Add(1)
	}
}

// failing is a runner that fails at once, every time, counting its runs.
func failing(runs *atomic.Int32) tenure.Runner {
	return tenure.RunnerFunc(func(context.Context, tenure.Lease) error {
		runs.Add(1)
		return errors.New("config file missing on this host")
	})
}

func TestACrashLoopingHolderHandsTheKeyToAHealthyPeerWithinTheFailureWindow(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		obs := &crashLoops{}
		var aRuns atomic.Int32
		a := newReplica(t, st, "A", func(c *tenure.Config) { c.Observer = obs })
		a.Set("report", tenure.Job{Runner: failing(&aRuns)})
		a.start()
		defer a.stop()
		began := time.Now()
		advance(time.Second)
		b := newReplica(t, st, "B")
		b.Set("report", tenure.Job{Runner: b.rec.runner("ok")})
		b.start()
		defer b.stop()

		// The defaults: 3 failures within 8×BackoffMin (80s here); tries
		// at 0, BackoffMin and 3×BackoffMin (30s), then the handover.
		window := 8 * renew
		advance(window + time.Second - time.Since(began))
		starts := b.rec.startsOf("report")
		if len(starts) != 1 {
			t.Fatalf("B started %d times within the failure window + 1s, want once (A ran %d times)", len(starts), aRuns.Load())
		}
		if took := starts[0].at.Sub(began); took > 3*renew+time.Second {
			t.Fatalf("B started %v after A's first failure, want by the third failure (%v)", took, 3*renew)
		}
		if n := aRuns.Load(); n != 3 {
			t.Fatalf("A ran %d times, want 3 before it handed over", n)
		}
		if n := obs.n.Load(); n != 1 {
			t.Fatalf("A reported %d crash-loop handovers, want 1", n)
		}
		ks := a.KeyStatus("report")
		if ks.CoolingUntil.IsZero() || ks.LastError == "" || ks.LeaderHere {
			t.Fatalf("A's status %+v, want cooling with the last error, not leader", ks)
		}

		// While it cools, A never asks for the key, even when it is free.
		b.Set("report", tenure.Job{Runner: b.rec.runner("ok"), Disabled: true})
		advance(time.Second)
		if l := a.KeyStatus("report"); l.LeaderHere || aRuns.Load() != 3 {
			t.Fatalf("A took the key back while cooling: %+v, %d runs", l, aRuns.Load())
		}
		// After the cooldown it may try again.
		advance(time.Until(ks.CoolingUntil) + time.Second)
		if n := aRuns.Load(); n != 4 {
			t.Fatalf("A ran %d times after its cooldown, want one more try (4)", n)
		}
	})
}

func TestANegativeMaxFailuresKeepsTheKeyAndBacksOffForever(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var aRuns atomic.Int32
		a := newReplica(t, st, "A")
		a.Set("report", tenure.Job{Runner: failing(&aRuns), MaxFailures: -1})
		a.start()
		defer a.stop()
		advance(time.Second)
		b := newReplica(t, st, "B")
		b.Set("report", tenure.Job{Runner: b.rec.runner("ok")})
		b.start()
		defer b.stop()

		advance(5 * time.Minute)
		if n := len(b.rec.startsOf("report")); n != 0 || !a.KeyStatus("report").LeaderHere || aRuns.Load() < 4 {
			t.Fatalf("B started %d times, A leader %v after %d runs; want A to keep the key and back off", n, a.KeyStatus("report").LeaderHere, aRuns.Load())
		}
	})
}

func TestCrashLoopSettingsAreValidated(t *testing.T) {
	st := memstore.New(memstore.Options{})
	if _, err := tenure.New(tenure.Config{Store: st, Cooldown: -time.Second}); !errors.Is(err, tenure.ErrConfig) {
		t.Fatalf("negative Cooldown: %v, want ErrConfig", err)
	}
	sup, err := tenure.New(tenure.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Set("k", tenure.Job{Runner: tenure.RunnerFunc(func(context.Context, tenure.Lease) error { return nil }), FailureWindow: -time.Second}); !errors.Is(err, tenure.ErrConfig) {
		t.Fatalf("negative Job.FailureWindow: %v, want ErrConfig", err)
	}
}

func TestAPoolKeyThatKeepsFailingOnOneWorkerMovesToAnother(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		l := newLedger(t)
		src := tenure.StaticKeys(poolKeys(6)...)
		// On w0 one key's runner fails every time; every other run is fine.
		var badRuns atomic.Int32
		bad := tenure.RunnerFunc(func(ctx context.Context, lease tenure.Lease) error {
			if lease.Key == "acct-0000" {
				badRuns.Add(1)
				return errors.New("mailbox locked on this host")
			}
			return l.runner().Run(ctx, lease)
		})
		w0 := poolWorker(t, st, "w0", src, l, func(p *tenure.Pool) { p.Runner = bad }).start()
		defer w0.stop()
		advance(2 * renew) // w0 alone holds every key, acct-0000 failing
		if !w0.KeyStatus(tenure.PoolPrefix + "mail/acct-0000").LeaderHere {
			t.Fatal("w0 does not hold acct-0000: the test starts from the wrong state")
		}
		var onW1 atomic.Int32
		w1 := poolWorker(t, st, "w1", src, l, func(p *tenure.Pool) {
			p.Runner = tenure.RunnerFunc(func(ctx context.Context, lease tenure.Lease) error {
				if lease.Key == "acct-0000" {
					onW1.Add(1)
				}
				return l.runner().Run(ctx, lease)
			})
		}).start()
		defer w1.stop()

		advance(8 * renew)
		if n := badRuns.Load(); n != 3 {
			t.Fatalf("acct-0000 ran %d times on w0, want 3 before the handover", n)
		}
		// w1 ran it after the handover. (Whether it keeps it is the pool
		// policy's: it may hand the key back to w0, its preferred worker,
		// once held for MinHold — a known gap, see the closing note.)
		if onW1.Load() == 0 {
			t.Fatal("acct-0000 never ran on w1 after w0 handed it over")
		}
	})
}

func TestAFailureWindowTheBackoffCannotFitIsRefused(t *testing.T) {
	st := memstore.New(memstore.Options{})
	// 3 failures under a backoff from 10s: at 0, 10 and 30s; a 15s window
	// never holds them.
	_, err := tenure.New(tenure.Config{Store: st, TTL: 30 * time.Second, FailureWindow: 15 * time.Second})
	if !errors.Is(err, tenure.ErrConfig) || !strings.Contains(err.Error(), "never be handed over") {
		t.Fatalf("New: %v, want ErrConfig saying the handover could never happen", err)
	}
	sup, err := tenure.New(tenure.Config{Store: st, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runner := tenure.RunnerFunc(func(context.Context, tenure.Lease) error { return nil })
	if err := sup.Set("k", tenure.Job{Runner: runner, MaxFailures: 5}); !errors.Is(err, tenure.ErrConfig) {
		t.Fatalf("Set with 5 failures in the default window: %v, want ErrConfig", err)
	}
	if err := sup.Set("k", tenure.Job{Runner: runner, MaxFailures: 5, FailureWindow: 5 * time.Minute}); err != nil {
		t.Fatalf("Set with a window that fits: %v", err)
	}
}
