package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
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

func TestWithoutAStoreEveryKeyRunsLocally(t *testing.T) {
	bubble(t, func(t *testing.T, _ *memstore.Store) {
		a := newReplica(t, nil, "A", func(c *tenure.Config) { c.Leases = tenure.LeasesAuto }).channels(t).start()
		defer a.stop()
		if a.Leased() {
			t.Fatal("no store, no multi-instance signal: leases must be off")
		}
		wantRunning(t, "A", a, "telegram", "discord", "github")
		if s := a.KeyStatus("telegram"); s.Leased || s.Leader != "" || !s.Running || !s.Enabled {
			t.Fatalf("status %+v, want running without leader fields", s)
		}
		if a.PeerKeys() != nil || a.LeaderOf("telegram") != "" {
			t.Fatal("single-instance mode reports peers")
		}
	})
}

// A Config with a Store means leases: before, one without MultiInstance
// ran every key on every replica that shared the store.
func TestAConfiguredStoreMeansLeasesUnlessTurnedOffExplicitly(t *testing.T) {
	st := memstore.New(memstore.Options{})
	for _, tc := range []struct {
		mode  tenure.LeaseMode
		multi bool
		want  bool
	}{
		{tenure.LeasesAuto, false, true},
		{tenure.LeasesAuto, true, true},
		{tenure.LeasesOff, true, false},
		{tenure.LeasesOff, false, false},
		{tenure.LeasesOn, false, true},
	} {
		sup, err := tenure.New(tenure.Config{Store: st, Leases: tc.mode, MultiInstance: tc.multi})
		if err != nil {
			t.Fatal(err)
		}
		if sup.Leased() != tc.want {
			t.Errorf("Leases %v, multi-instance %v: leased %v, want %v", tc.mode, tc.multi, sup.Leased(), tc.want)
		}
	}
}

func TestAnActiveLeaseWithoutAStoreRefusesToBuild(t *testing.T) {
	for _, cfg := range []tenure.Config{
		{Leases: tenure.LeasesOn},
		{Leases: tenure.LeasesAuto, MultiInstance: true},
	} {
		_, err := tenure.New(cfg)
		if !errors.Is(err, tenure.ErrConfig) || !strings.Contains(err.Error(), "Store") {
			t.Errorf("New(%+v) = %v, want a config error naming Store", cfg, err)
		}
	}
}

func TestImpossibleTimingIsRefusedNamingTheField(t *testing.T) {
	st := memstore.New(memstore.Options{})
	for _, tc := range []struct {
		cfg   tenure.Config
		field string
	}{
		{tenure.Config{TTL: -time.Second}, "TTL"},
		{tenure.Config{TTL: time.Nanosecond}, "TTL"},
		{tenure.Config{Grace: -time.Second}, "Grace"},
		{tenure.Config{TTL: 10 * time.Second, RenewEvery: 5 * time.Second}, "RenewEvery"},
		{tenure.Config{RenewEvery: 20 * time.Second}, "RenewEvery"},
		{tenure.Config{CallTimeout: 4 * time.Second}, "CallTimeout"},
		{tenure.Config{StopTimeout: -1}, "StopTimeout"},
		{tenure.Config{Owner: "bad\x00owner"}, "Owner"},
		{tenure.Config{Leases: tenure.LeaseMode(7)}, "Leases"},
	} {
		tc.cfg.Store = st
		if tc.cfg.Leases == 0 {
			tc.cfg.Leases = tenure.LeasesOn
		}
		_, err := tenure.New(tc.cfg)
		if !errors.Is(err, tenure.ErrConfig) || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("%+v: got %v, want a config error for %s", tc.cfg, err, tc.field)
		}
	}
	sup, err := tenure.New(tenure.Config{Store: st, Leases: tenure.LeasesOn})
	if err != nil {
		t.Fatal(err)
	}
	c := sup.Config()
	if c.TTL != 15*time.Second || c.Grace != 5*time.Second || c.RenewEvery != 5*time.Second || c.CallTimeout != 2500*time.Millisecond || c.StopTimeout != 5*time.Second {
		t.Fatalf("defaults %+v", c)
	}
}

func TestBadKeysAndJobsAreRefused(t *testing.T) {
	sup, _ := tenure.New(tenure.Config{})
	for _, key := range []string{"", strings.Repeat("k", 513), "a\x00b", "tab\there", string([]byte{0xff})} {
		if err := sup.Set(key, tenure.Job{Runner: tenure.RunnerFunc(nil)}); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Set(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if err := sup.Set("ok", tenure.Job{}); !errors.Is(err, tenure.ErrConfig) {
		t.Errorf("a job without a runner: %v", err)
	}
	if err := sup.Remove(context.Background(), "never-set"); !errors.Is(err, tenure.ErrUnknownKey) {
		t.Errorf("Remove of an unknown key: %v", err)
	}
}

func TestEverywhereKeysRunOnEveryReplicaWithoutALease(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		b := newReplica(t, st, "B").channels(t).start()
		defer a.stop()
		defer b.stop()
		if len(a.rec.startsOf("github")) != 1 || len(b.rec.startsOf("github")) != 1 {
			t.Fatal("github must run on both replicas")
		}
		if all, _ := st.List(context.Background(), "github"); len(all) != 0 {
			t.Fatalf("an everywhere key took a lease: %+v", all)
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

// partition cuts one replica off from a shared store, as a crashed or
// isolated process would be.
type partition struct {
	store.Store
	cut atomic.Bool
}

var errPartitioned = errors.New("connection reset")

func (p *partition) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if p.cut.Load() {
		return store.AcquireResult{}, errPartitioned
	}
	return p.Store.Acquire(ctx, req)
}

func (p *partition) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	return p.Store.Renew(ctx, owner, ttl, items)
}

func (p *partition) Release(ctx context.Context, owner string, terms []store.Term) error {
	if p.cut.Load() {
		return errPartitioned
	}
	return p.Store.Release(ctx, owner, terms)
}

func (p *partition) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	return p.Store.List(ctx, prefix)
}

func TestACrashedHolderIsReplacedAtExpiryPlusGraceAndNoSooner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &partition{Store: st}
		a := newReplica(t, cut, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		defer a.stop()
		advance(3 * time.Second)
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()

		advance(renew) // A renews at 10s; B must not take a live lease
		lastRenewal := time.Now().Add(-3 * time.Second)
		cut.cut.Store(true)
		advance(ttl + grace)
		got := b.rec.startsOf("telegram")
		if len(got) != 1 {
			t.Fatalf("B started %d times after the crash", len(got))
		}
		if took := got[0].at.Sub(lastRenewal); took != ttl+grace {
			t.Fatalf("B took over %v after A's last renewal, want exactly TTL + grace = %v", took, ttl+grace)
		}
		if aStops := a.rec.startsOf("telegram"); len(aStops) != 1 {
			t.Fatalf("A started %d times", len(aStops))
		}
		if a.running()["telegram"] {
			t.Fatal("A, cut off, still runs telegram")
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

func TestConfigErrorsNameTheirFieldAndValidateNeedsNoStore(t *testing.T) {
	err := tenure.Config{TTL: 10 * time.Second, RenewEvery: 6 * time.Second}.Validate()
	var ce *tenure.ConfigError
	if !errors.As(err, &ce) || ce.Field != "RenewEvery" || !errors.Is(err, tenure.ErrConfig) {
		t.Fatalf("Validate = %v, want a ConfigError for RenewEvery", err)
	}
	if err := (tenure.Config{Leases: tenure.LeasesOn}).Validate(); err != nil {
		t.Fatalf("defaults without a store: %v", err)
	}
}
