package tenure_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestAPausedKeyStopsEverywhereUntilResumed(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t)
		var cause atomic.Value
		recorded := a.rec.runner("telegram-1")
		a.Set("telegram", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			err := recorded.Run(ctx, l)
			cause.Store(context.Cause(ctx))
			return err
		})})
		a.start()
		defer a.stop()
		advance(time.Second)
		b := newReplica(t, st, "B").channels(t).start()
		defer b.stop()
		wantRunning(t, "A", a, "telegram", "discord", "github")

		if err := tenure.Pause(context.Background(), st, "telegram"); err != nil {
			t.Fatal(err)
		}
		if err := tenure.Pause(context.Background(), st, "telegram"); err != nil {
			t.Fatalf("pausing a paused key: %v, want nothing to happen", err)
		}
		advance(renew) // one round of each replica
		wantRunning(t, "A", a, "discord", "github")
		wantRunning(t, "B", b, "github")
		if got, _ := cause.Load().(error); !errors.Is(got, tenure.ErrPaused) {
			t.Fatalf("A's telegram runner stopped with %v, want ErrPaused", got)
		}
		if l := lease(t, st, "telegram"); l.Live {
			t.Fatalf("telegram's lease %+v is still live while paused, want it released", l)
		}
		if !a.KeyStatus("telegram").Paused || !b.KeyStatus("telegram").Paused {
			t.Fatal("status does not say telegram is paused")
		}
		advance(5 * renew) // nobody takes it while paused
		if n := len(a.rec.startsOf("telegram")) + len(b.rec.startsOf("telegram")); n != 1 {
			t.Fatalf("telegram started %d times while paused, want only the first run", n)
		}

		was, err := tenure.Resume(context.Background(), st, "telegram")
		if err != nil || !was {
			t.Fatalf("Resume: %v, %v", was, err)
		}
		advance(renew)
		if n := len(a.rec.startsOf("telegram")) + len(b.rec.startsOf("telegram")); n != 2 {
			t.Fatalf("telegram started %d times one round after Resume, want 2", n)
		}
		if was, err := tenure.Resume(context.Background(), st, "telegram"); err != nil || was {
			t.Fatalf("resuming a key that is not paused: %v, %v; want false, nil", was, err)
		}
	})
}

func TestOnlySingletonKeysCanBePaused(t *testing.T) {
	st := memstore.New(memstore.Options{})
	for _, key := range []string{"~pool/mail/acct-1", "x~paused", ""} {
		if err := tenure.Pause(context.Background(), st, key); err == nil {
			t.Errorf("Pause(%q) = nil, want an error", key)
		}
	}
	sup, err := tenure.New(tenure.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Set("report~paused", tenure.Job{Runner: tenure.RunnerFunc(func(context.Context, tenure.Lease) error { return nil })}); !errors.Is(err, tenure.ErrConfig) {
		t.Errorf("Set of a key holding the pause suffix: %v, want ErrConfig", err)
	}
}
