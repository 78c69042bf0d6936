package tenure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

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
		{tenure.Config{TTL: store.MaxTTL + time.Second}, "TTL"},
		{tenure.Config{Grace: -time.Second}, "Grace"},
		{tenure.Config{Grace: store.MaxTTL + time.Second}, "Grace"},
		{tenure.Config{TTL: 10 * time.Second, RenewEvery: 5 * time.Second}, "RenewEvery"},
		{tenure.Config{RenewEvery: 20 * time.Second}, "RenewEvery"},
		{tenure.Config{CallTimeout: 4 * time.Second}, "CallTimeout"},
		{tenure.Config{StopTimeout: -1}, "StopTimeout"},
		{tenure.Config{FullReadEvery: -time.Second}, "FullReadEvery"},
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
	if c.TTL != 15*time.Second || c.Grace != 5*time.Second || c.RenewEvery != 5*time.Second || c.CallTimeout != 2500*time.Millisecond || c.StopTimeout != 5*time.Second || c.FullReadEvery != time.Minute {
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
