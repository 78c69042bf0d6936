package tenure_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// Two pools with the same key names, and a singleton named like one of
// their keys, never share a lease: each runs all of its keys.
func TestPoolsWithTheSameKeyNamesNeverShareALease(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &runLog{}
		names := []string{"a", "b", "c"}
		mail := newReplica(t, st, "mail-worker")
		mail.AddPool(tenure.Pool{Name: "mail", Source: tenure.StaticKeys(names...), Runner: runs.runner("mail")})
		other := newReplica(t, st, "other-worker")
		other.AddPool(tenure.Pool{Name: "other", Source: tenure.StaticKeys(names...), Runner: runs.runner("other")})
		single := newReplica(t, st, "single")
		single.Set("b", tenure.Job{Runner: runs.runner("single")})
		for _, r := range []*replica{mail, other, single} {
			r.start()
			defer r.stop()
		}
		advance(10 * renew)
		for _, key := range names {
			byWho := map[string]int{}
			for _, r := range runs.of(key) {
				if r.ended.IsZero() {
					byWho[r.replica]++
				}
			}
			want := map[string]int{"mail": 1, "other": 1}
			if key == "b" {
				want["single"] = 1
			}
			if fmt.Sprint(byWho) != fmt.Sprint(want) {
				t.Errorf("key %s runs on %v, want %v", key, byWho, want)
			}
		}
	})
}

// A supervisor plans all its pools from one pass over its view of the
// table: two pools with the same key names, on each of two replicas, are
// each shared between the replicas, every key of each running once.
func TestEveryPoolOfASupervisorIsPlannedFromOnePass(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		names := poolKeys(12)
		logs := map[string]*runLog{"mail": {}, "chat": {}}
		for _, name := range []string{"r1", "r2"} {
			r := newReplica(t, st, name)
			for pool, log := range logs {
				if err := r.AddPool(tenure.Pool{Name: pool, Source: tenure.StaticKeys(names...), Runner: log.runner(name),
					OrphanDelay: 2 * time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			r.start()
			defer r.stop()
		}
		advance(8 * renew)
		for pool, log := range logs {
			perReplica := map[string]int{}
			for _, key := range names {
				live := 0
				for _, r := range log.of(key) {
					if r.ended.IsZero() {
						live++
						perReplica[r.replica]++
					}
				}
				if live != 1 {
					t.Errorf("%s key %s runs %d times, want once", pool, key, live)
				}
			}
			if perReplica["r1"] < 5 || perReplica["r2"] < 5 {
				t.Errorf("%s's 12 keys run %v, want about 6 on each", pool, perReplica)
			}
			if o := log.overlaps(); len(o) > 0 {
				t.Errorf("%s: %v", pool, o)
			}
		}
	})
}

// With Config.Prefix, everything a supervisor must see — its keys, its
// pools' keys and memberships — lives under the prefix, and a key that
// could not be seen there is refused.
func TestAPrefixHoldsEverythingTheSupervisorMustSee(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		withPrefix := func(c *tenure.Config) { c.Prefix = "app/" }
		r := newReplica(t, st, "single", withPrefix)
		if err := r.Set("telegram", tenure.Job{Runner: r.rec.runner("t")}); err == nil {
			t.Error("a key outside the prefix was accepted: it would never be listed or watched")
		}
		if err := r.Set("app/telegram", tenure.Job{Runner: r.rec.runner("t")}); err != nil {
			t.Errorf("a key under the prefix was refused: %v", err)
		}
		for _, bad := range []string{"app/~pool/x/y", "app/a~workers/p/o@1"} {
			if err := r.Set(bad, tenure.Job{Runner: r.rec.runner("t")}); err == nil {
				t.Errorf("a key holding a segment reserved for pools was accepted: %q", bad)
			}
		}
		if _, err := tenure.New(tenure.Config{Prefix: "a~b"}); err == nil {
			t.Error("a prefix holding '~' was accepted")
		}
	})
}

func TestAPoolUnderAPrefixSharesItsKeysFairly(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		l := newLedger(t)
		src := tenure.StaticKeys(poolKeys(30)...)
		for i := range 3 {
			w := newReplica(t, st, fmt.Sprintf("w%d", i), func(c *tenure.Config) { c.Prefix = "app/" })
			if err := w.AddPool(tenure.Pool{Name: "mail", Source: src, Runner: l.runner(), OrphanDelay: 2 * time.Second}); err != nil {
				t.Fatal(err)
			}
			w.start()
			defer w.stop()
		}
		advance(8 * renew)
		if n := l.total(); n != 30 {
			t.Fatalf("%d of 30 keys run", n)
		}
		for owner, n := range l.perOwner() {
			if n < 9 || n > 11 {
				t.Errorf("%s runs %d keys, fair share is 10 (cap 11): the workers do not see each other", owner, n)
			}
		}
		if leases, _ := st.List(t.Context(), ""); len(leases) != 33 {
			t.Errorf("%d leases in the store, want 30 keys and 3 memberships", len(leases))
		} else {
			for _, le := range leases {
				if !strings.HasPrefix(le.Key, "app/") {
					t.Errorf("lease %q lies outside the prefix", le.Key)
				}
			}
		}
	})
}

// A weight that is not a finite positive number is refused on the way in,
// and a peer whose membership carries one is ignored, not let into every
// other worker's arithmetic.
func TestBadWeightsAreRefusedAndAPeerWithOneIsIgnored(t *testing.T) {
	sup, err := tenure.New(tenure.Config{Store: memstore.New(memstore.Options{}), Leases: tenure.LeasesOn})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []tenure.Pool{
		{Weight: math.Inf(1)}, {Weight: math.NaN()}, {Weight: -1},
		{Epsilon: math.Inf(1)}, {Epsilon: math.NaN()}, {HandoffRate: math.NaN()},
	} {
		p.Name, p.Source, p.Runner = fmt.Sprintf("p%d", i), tenure.StaticKeys("a"), newRecorder().runner("x")
		if err := sup.AddPool(p); err == nil {
			t.Errorf("AddPool accepted weight %v, epsilon %v, handoff rate %v", p.Weight, p.Epsilon, p.HandoffRate)
		}
	}

	bubble(t, func(t *testing.T, st *memstore.Store) {
		for _, w := range []string{"+Inf", "NaN"} {
			owner := "peer-" + w + "#0badcafe"
			st.Put(store.Lease{Key: tenure.WorkerPrefix + "mail/" + owner + "@" + w, Owner: owner, Epoch: 1, TimeLeft: time.Hour, Running: true})
		}
		logs := &logRecorder{}
		l := newLedger(t)
		w := poolWorker(t, st, "w0", tenure.StaticKeys(poolKeys(30)...), l)
		w2 := poolWorker(t, st, "w1", tenure.StaticKeys(poolKeys(30)...), l)
		r := newReplica(t, st, "w2", withLogger(slog.New(logs)))
		if err := r.AddPool(tenure.Pool{Name: "mail", Source: tenure.StaticKeys(poolKeys(30)...), Runner: l.runner(), OrphanDelay: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
		for _, x := range []*replica{w, w2, r} {
			x.start()
			defer x.stop()
		}
		advance(8 * renew)
		if n := l.total(); n != 30 {
			t.Fatalf("%d of 30 keys run with a malformed peer in the pool", n)
		}
		if _, ok := logs.find(slog.LevelWarn, "ignored"); !ok {
			t.Errorf("the malformed peer was not logged; logs:\n%s", logs.dump())
		}
	})
}

// A key source that lists keys twice must not make them bounce: each runs
// once, on one worker, and stays there.
func TestDuplicateKeysFromASourceRunOnceEach(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		keys := poolKeys(10)
		src := tenure.StaticKeys(append(keys, keys...)...)
		l := newLedger(t)
		for i := range 2 {
			w := poolWorker(t, st, fmt.Sprintf("w%d", i), src, l)
			w.start()
			defer w.stop()
		}
		advance(60 * renew)
		if n := l.total(); n != 10 {
			t.Fatalf("%d of 10 keys run", n)
		}
		for _, k := range keys {
			if n := l.starts[k]; n > 2 {
				t.Errorf("%s started %d times in 60 rounds", k, n)
			}
		}
	})
}

// Shutdown stops the runners and releases their leases first, and only
// then waits for a key source still being read: a source that ignores its
// context must not hold the handoff up.
func TestShutdownReleasesBeforeWaitingForAKeySource(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		block := make(chan struct{})
		var reads atomic.Int32
		src := tenure.KeySourceFunc(func(context.Context) ([]string, error) {
			if reads.Add(1) > 1 {
				<-block // a second read that ignores its context
			}
			return []string{"a"}, nil
		})
		l := newLedger(t)
		w := newReplica(t, st, "w0")
		if err := w.AddPool(tenure.Pool{Name: "mail", Source: src, Runner: l.runner(), RefreshEvery: renew}); err != nil {
			t.Fatal(err)
		}
		w.start()
		advance(3 * renew)
		if reads.Load() < 2 || l.total() != 1 {
			t.Fatalf("%d reads, %d keys run; want the second read hanging and a running", reads.Load(), l.total())
		}
		stopped := make(chan error, 1)
		go func() { stopped <- w.stop() }()
		synctest.Wait()
		if le := lease(t, st, tenure.PoolPrefix+"mail/a"); !le.Released {
			t.Errorf("while the source hangs, a's lease is %+v, want released", le)
		}
		close(block)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
	})
}
