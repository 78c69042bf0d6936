package tenure_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A replica whose key source does not answer (a command missing on one
// host, a database it cannot reach) can run none of the pool's keys.
// Counted as a member, it took a share: the healthy replica stopped
// claiming at its own cap, so 9 of 20 keys ran nowhere, and the keys the
// broken one prefers were handed to it, never claimed, and taken back,
// again and again. It joins the pool only once it has read its keys, and
// then takes its share.
func TestAReplicaThatCannotReadItsKeysTakesNoShareUntilItCan(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		keys := poolKeys(20)
		l := newLedger(t)
		good := poolWorker(t, st, "good", tenure.StaticKeys(keys...), l)
		var mended atomic.Bool
		broken := poolWorker(t, st, "broken", tenure.KeySourceFunc(func(context.Context) ([]string, error) {
			if !mended.Load() {
				return nil, errors.New("psql: command not found")
			}
			return keys, nil
		}), l)
		good.start()
		defer good.stop()
		broken.start()
		defer broken.stop()
		advance(20 * renew)
		if n := l.total(); n != len(keys) {
			t.Errorf("%d of %d keys run, on %v; want every key run by the replica that can read them", n, len(keys), l.perOwner())
		}
		for _, k := range keys {
			if n := l.starts[k]; n != 1 {
				t.Errorf("key %s started %d times; want once", k, n)
			}
		}
		mended.Store(true)
		if err := broken.RefreshPool("mail"); err != nil {
			t.Fatal(err)
		}
		advance(20 * renew) // a round to join, then hand-overs after the minimum hold
		if got := l.perOwner(); l.total() != len(keys) || got["broken"] < 9 || got["good"] < 9 {
			t.Errorf("once the source answers: %d of %d keys run, on %v; want both replicas within their band", l.total(), len(keys), got)
		}
	})
}

// Run starts each pool's reading of its source, so a pool added while it
// runs was never read: AddPool returned nil and the pool ran nothing,
// without a word. It is refused.
func TestAPoolAddedWhileRunningIsRefused(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		w := newReplica(t, st, "w0").start()
		defer w.stop()
		err := w.AddPool(tenure.Pool{Name: "mail", Source: tenure.StaticKeys("a"), Runner: newLedger(t).runner()})
		if !errors.Is(err, tenure.ErrConfig) {
			t.Errorf("AddPool while running: %v; want an error wrapping ErrConfig", err)
		}
	})
}

// A replica that cannot read its pool's keys takes no part in the pool,
// and so appears in no peer's view of it: it says so itself, in Ready
// (a rollout whose new source fails then stops at its first replica), in
// Pools and to its Observer.
func TestAReplicaThatCannotReadItsKeysSaysSo(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		keys := poolKeys(20)
		var mended atomic.Bool
		obs := &sourceObserver{}
		r := newReplica(t, st, "broken", func(cfg *tenure.Config) { cfg.Observer = obs })
		err := r.AddPool(tenure.Pool{Name: "mail", Runner: newLedger(t).runner(), Source: tenure.KeySourceFunc(func(context.Context) ([]string, error) {
			if !mended.Load() {
				return nil, errors.New("psql: command not found")
			}
			return keys, nil
		})})
		if err != nil {
			t.Fatal(err)
		}
		r.start()
		stopped := false
		defer func() {
			if !stopped {
				r.stop()
			}
		}()
		advance(3 * renew)
		if err := r.Ready(); !errors.Is(err, tenure.ErrPoolKeysUnread) || !strings.Contains(err.Error(), "psql: command not found") || !strings.Contains(err.Error(), "mail") {
			t.Errorf("Ready() = %v; want ErrPoolKeysUnread naming the pool and the source's error", err)
		}
		if ps := r.Pools(); len(ps) != 1 || ps[0].Member || ps[0].Error == "" {
			t.Errorf("Pools() = %+v; want mail, not a member, with the source's error", ps)
		}
		if got, want := obs.last(), (tenure.PoolSource{Pool: "mail", Failing: true}); got != want {
			t.Errorf("observed %+v; want %+v", got, want)
		}

		mended.Store(true)
		if err := r.RefreshPool("mail"); err != nil {
			t.Fatal(err)
		}
		advance(3 * renew)
		if err := r.Ready(); err != nil {
			t.Errorf("Ready() once the keys are read = %v", err)
		}
		if ps := r.Pools(); len(ps) != 1 || !ps[0].Member || ps[0].Error != "" {
			t.Errorf("Pools() once the keys are read = %+v; want a member", ps)
		}
		if got, want := obs.last(), (tenure.PoolSource{Pool: "mail", Keys: 20, Member: true}); got != want {
			t.Errorf("observed %+v once the keys are read; want %+v", got, want)
		}

		stopped = true
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		if got, want := obs.last(), (tenure.PoolSource{Pool: "mail"}); got != want {
			t.Errorf("observed %+v once stopped; want %+v: nothing read, held or failing", got, want)
		}
	})
}

// sourceObserver keeps the last pool source reported.
type sourceObserver struct {
	tenure.NopObserver
	mu      sync.Mutex
	sources []tenure.PoolSource
}

func (o *sourceObserver) PoolSources(s []tenure.PoolSource) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sources = slices.Clone(s)
}

func (o *sourceObserver) last() tenure.PoolSource {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.sources) != 1 {
		return tenure.PoolSource{Pool: fmt.Sprintf("%d pools", len(o.sources))}
	}
	return o.sources[0]
}

// A key source that ignores its context (an HTTP call made without it)
// never returned: the replica said "not read yet" for ever, without
// saying its source was failing, and Run, which waits for the source's
// reader, never returned. A read is given up a second past its timeout,
// counted as failing, and not started again until the stuck one returns.
func TestAKeySourceThatIgnoresItsContextFailsAndHoldsNothingUp(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		release := make(chan struct{})
		var reads atomic.Int32
		obs := &sourceObserver{}
		r := newReplica(t, st, "w", func(cfg *tenure.Config) { cfg.Observer = obs })
		if err := r.AddPool(tenure.Pool{Name: "mail", Runner: newLedger(t).runner(), RefreshEvery: renew,
			Source: tenure.KeySourceFunc(func(context.Context) ([]string, error) {
				reads.Add(1)
				<-release
				return []string{"a"}, nil
			})}); err != nil {
			t.Fatal(err)
		}
		defer close(release)
		r.start()
		advance(5 * renew)
		if got, want := obs.last(), (tenure.PoolSource{Pool: "mail", Failing: true}); got != want {
			t.Errorf("observed %+v with the source stuck; want %+v", got, want)
		}
		if n := reads.Load(); n != 1 {
			t.Errorf("%d reads started while the first is stuck; want 1", n)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- r.stop() }()
		advance(2 * time.Second)
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Run did not return with its key source stuck")
		}
	})
}

// A source that ignores its context but answers, late, is used when it
// answers: its keys count, and the replica joins.
func TestALateAnswerOfAKeySourceCounts(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		obs := &sourceObserver{}
		r := newReplica(t, st, "w", func(cfg *tenure.Config) { cfg.Observer = obs })
		if err := r.AddPool(tenure.Pool{Name: "mail", Runner: newLedger(t).runner(), RefreshEvery: time.Hour, SourceTimeout: time.Second,
			Source: tenure.KeySourceFunc(func(context.Context) ([]string, error) {
				time.Sleep(5 * time.Second) // past the timeout and its grace
				return poolKeys(4), nil
			})}); err != nil {
			t.Fatal(err)
		}
		r.start()
		defer r.stop()
		advance(3 * time.Second)
		if ps := r.Pools(); len(ps) != 1 || ps[0].Member || !strings.Contains(ps[0].Error, "did not return") {
			t.Errorf("Pools() = %+v before the late answer; want mail failing, not a member", ps)
		}
		advance(3 * renew)
		if got, want := obs.last(), (tenure.PoolSource{Pool: "mail", Keys: 4, Member: true}); got != want {
			t.Errorf("observed %+v after the late answer; want %+v: its keys read, and a member", got, want)
		}
	})
}

// Run ends without waiting for a read of a key source that ignores its
// context, even one still within its timeout.
func TestRunEndsWithoutWaitingForAStuckKeySourceRead(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		release := make(chan struct{})
		defer close(release)
		r := newReplica(t, st, "w")
		if err := r.AddPool(tenure.Pool{Name: "mail", Runner: newLedger(t).runner(),
			Source: tenure.KeySourceFunc(func(context.Context) ([]string, error) {
				<-release
				return nil, nil
			})}); err != nil {
			t.Fatal(err)
		}
		r.start()
		advance(renew / 2) // the first read is under way, within its timeout
		stopped := make(chan error, 1)
		go func() { stopped <- r.stop() }()
		advance(time.Millisecond)
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Run waited for a key source read that ignores its context")
		}
	})
}
