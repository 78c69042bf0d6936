package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/metrics"
	"github.com/tenure-dev/tenure/store/memstore"
)

// TestTheCollectorCountsWhatTheSupervisorDoes runs one key through a whole
// term — acquire, start, renew, release — and reads each metric back
// from a registry, as Prometheus would.
func TestTheCollectorCountsWhatTheSupervisorDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := metrics.New()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		sup, err := tenure.New(tenure.Config{
			Store: memstore.New(memstore.Options{}), Owner: "r1", Observer: m,
			TTL: 3 * time.Second, Grace: time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := sup.Set("job", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
			<-ctx.Done()
			return nil
		})}); err != nil {
			t.Fatal(err)
		}
		stop := runFor(t, sup, 5*time.Second) // a few renewals on the bubble's clock
		for name, want := range map[string]float64{"tenure_leases_held": 1, "tenure_acquisitions_total": 1} {
			if got := gathered(t, reg, name); got != want {
				t.Errorf("%s = %v while held, want %v", name, got, want)
			}
		}
		if got := gathered(t, reg, "tenure_renewals_total", "outcome", "renewed"); got < 1 {
			t.Errorf("tenure_renewals_total{outcome=renewed} = %v after 5s at RenewEvery 1s", got)
		}
		if got, want := gathered(t, reg, "tenure_last_renewal_timestamp_seconds"), float64(time.Now().Unix()); want-got > 1 {
			t.Errorf("tenure_last_renewal_timestamp_seconds = %v, want within RenewEvery of now (%v)", got, want)
		}
		if got := gathered(t, reg, "tenure_key_held", "key", "job"); got != 1 {
			t.Errorf("tenure_key_held{key=job} = %v while held, want 1", got)
		}
		if got := gathered(t, reg, "tenure_key_running", "key", "job"); got != 1 {
			t.Errorf("tenure_key_running{key=job} = %v while running, want 1", got)
		}
		// A removed key's series goes with it.
		if err := sup.Remove(t.Context(), "job"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n, err := testutil.GatherAndCount(reg, "tenure_key_held"); err != nil || n != 0 {
			t.Errorf("tenure_key_held has %d series after the key was removed (%v), want 0", n, err)
		}
		stop()
		for name, want := range map[string]float64{"tenure_leases_held": 0, "tenure_runner_starts_total": 1} {
			if got := gathered(t, reg, name); got != want {
				t.Errorf("%s = %v after shutdown, want %v", name, got, want)
			}
		}
		for cause, want := range map[string]float64{tenure.HandoverReleased: 1, tenure.HandoverLost: 0, tenure.HandoverCrashLoop: 0} {
			if got := gathered(t, reg, "tenure_handovers_total", "cause", cause); got != want {
				t.Errorf("tenure_handovers_total{cause=%q} = %v after shutdown, want %v", cause, got, want)
			}
		}
		if n, err := testutil.GatherAndCount(reg, "tenure_renewal_seconds", "tenure_round_seconds", "tenure_handoff_seconds"); err != nil || n != 3 {
			t.Errorf("histograms: %d, %v", n, err)
		}
	})
}

// gathered is the sum of a metric's samples, over every label set or,
// given a label name and value, over those that carry it.
func gathered(t *testing.T, reg *prometheus.Registry, name string, label ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(label) == 2 && !hasLabel(m.GetLabel(), label[0], label[1]) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

func hasLabel(pairs []*dto.LabelPair, name, value string) bool {
	for _, p := range pairs {
		if p.GetName() == name && p.GetValue() == value {
			return true
		}
	}
	return false
}

// runFor starts sup's Run and lets it run for d on the bubble's clock;
// stop ends it, failing t if Run failed.
func runFor(t *testing.T, sup *tenure.Supervisor, d time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel) // a test that fails before stop still ends Run in its bubble
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	time.Sleep(d)
	synctest.Wait()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoolsAreCountedPerPoolNotPerKey: a pool of thousands of keys must not
// make thousands of series.
func TestPoolsAreCountedPerPoolNotPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sup, reg := observed(t)
		if err := sup.AddPool(tenure.Pool{Name: "mail", Source: tenure.StaticKeys("a", "b", "c", "d", "e"),
			Runner: tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error { <-ctx.Done(); return nil })}); err != nil {
			t.Fatal(err)
		}
		stop := runFor(t, sup, 5*time.Second)
		if got := gathered(t, reg, "tenure_pool_keys_held", "pool", "mail"); got != 5 {
			t.Errorf("tenure_pool_keys_held{pool=mail} = %v, want 5", got)
		}
		if n, err := testutil.GatherAndCount(reg, "tenure_key_held"); err != nil || n != 0 {
			t.Errorf("tenure_key_held has %d series for a pool's keys (%v), want none", n, err)
		}
		stop()
	})
}

// TestAPoolWhoseKeysCannotBeReadShowsAsNotJoined: such a replica takes no
// part in the pool, so no peer lists it; its own metrics must say so.
func TestAPoolWhoseKeysCannotBeReadShowsAsNotJoined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sup, reg := observed(t)
		wait := tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error { <-ctx.Done(); return nil })
		for name, src := range map[string]tenure.KeySource{
			"mail": tenure.StaticKeys("a", "b", "c"),
			"broken": tenure.KeySourceFunc(func(context.Context) ([]string, error) {
				return nil, errors.New("imap-list: not found")
			}),
		} {
			if err := sup.AddPool(tenure.Pool{Name: name, Source: src, Runner: wait}); err != nil {
				t.Fatal(err)
			}
		}
		stop := runFor(t, sup, 5*time.Second)
		for _, want := range []struct {
			metric, pool string
			value        float64
		}{
			{"tenure_pool_member", "mail", 1}, {"tenure_pool_source_failing", "mail", 0}, {"tenure_pool_keys", "mail", 3},
			{"tenure_pool_member", "broken", 0}, {"tenure_pool_source_failing", "broken", 1}, {"tenure_pool_keys", "broken", 0},
		} {
			if n, err := testutil.GatherAndCount(reg, want.metric); err != nil || n != 2 {
				t.Errorf("%s: %d series (%v), want one per pool", want.metric, n, err)
			}
			if got := gathered(t, reg, want.metric, "pool", want.pool); got != want.value {
				t.Errorf("%s{pool=%s} = %v, want %v", want.metric, want.pool, got, want.value)
			}
		}
		stop()
		// A process that goes on serving metrics must not keep alerting
		// on a supervisor that has stopped.
		for _, metric := range []string{"tenure_pool_member", "tenure_pool_source_failing", "tenure_pool_keys"} {
			for _, pool := range []string{"mail", "broken"} {
				if got := gathered(t, reg, metric, "pool", pool); got != 0 {
					t.Errorf("%s{pool=%s} = %v once stopped, want 0", metric, pool, got)
				}
			}
		}
	})
}

// TestOnlyKeysSomeoneShouldHoldAreReported: an Everywhere key runs on every
// replica and a disabled one on none; reporting them would make the
// shipped alerts "running twice" and "held nowhere" fire on normal states.
func TestOnlyKeysSomeoneShouldHoldAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sup, reg := observed(t)
		wait := tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error { <-ctx.Done(); return nil })
		for key, job := range map[string]tenure.Job{
			"job":      {Runner: wait},
			"hook":     {Runner: wait, Mode: tenure.Everywhere},
			"disabled": {Runner: wait, Disabled: true},
		} {
			if err := sup.Set(key, job); err != nil {
				t.Fatal(err)
			}
		}
		stop := runFor(t, sup, 3*time.Second)
		if n, err := testutil.GatherAndCount(reg, "tenure_key_running"); err != nil || n != 1 {
			t.Errorf("tenure_key_running has %d series (%v), want 1: job's", n, err)
		}
		if got := gathered(t, reg, "tenure_key_held", "key", "job"); got != 1 {
			t.Errorf("tenure_key_held{key=job} = %v, want 1", got)
		}
		stop()
		if n, err := testutil.GatherAndCount(reg, "tenure_key_held"); err != nil || n != 0 {
			t.Errorf("tenure_key_held has %d series after Run returned (%v), want none", n, err)
		}
	})
}

// observed is a supervisor on a memstore whose collector is registered in
// the registry it returns.
func observed(t *testing.T) (*tenure.Supervisor, *prometheus.Registry) {
	t.Helper()
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	sup, err := tenure.New(tenure.Config{
		Store: memstore.New(memstore.Options{}), Owner: "r1", Observer: m,
		TTL: 3 * time.Second, Grace: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return sup, reg
}

// Keys sets only what changed; every change still reaches the series, and
// a key that leaves and comes back gets its series again.
func TestKeysFollowsEveryChangeOfAKey(t *testing.T) {
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	check := func(step string, held, running float64) {
		t.Helper()
		if got := gathered(t, reg, "tenure_key_held", "key", "job"); got != held {
			t.Errorf("%s: tenure_key_held = %v, want %v", step, got, held)
		}
		if got := gathered(t, reg, "tenure_key_running", "key", "job"); got != running {
			t.Errorf("%s: tenure_key_running = %v, want %v", step, got, running)
		}
	}
	m.Keys([]tenure.KeyState{{Key: "job", Held: true, Running: true}})
	check("held and running", 1, 1)
	m.Keys([]tenure.KeyState{{Key: "job", Held: true, Running: false}})
	check("runner stopped", 1, 0)
	m.Keys([]tenure.KeyState{{Key: "job", Held: false, Running: false}})
	check("lease lost", 0, 0)
	m.Keys(nil)
	if n, err := testutil.GatherAndCount(reg, "tenure_key_held"); err != nil || n != 0 {
		t.Fatalf("tenure_key_held has %d series after the key left (%v), want 0", n, err)
	}
	m.Keys([]tenure.KeyState{{Key: "job", Held: false, Running: false}})
	check("back, idle", 0, 0)
	if n, err := testutil.GatherAndCount(reg, "tenure_key_held"); err != nil || n != 1 {
		t.Errorf("tenure_key_held has %d series after the key came back (%v), want 1", n, err)
	}
}
