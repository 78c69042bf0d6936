package tenure_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

type gatedStore struct {
	*memstore.Store
	down    atomic.Bool
	gate    atomic.Bool
	once    sync.Once
	renewed chan struct{}
}

func (g *gatedStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if g.down.Load() {
		return store.AcquireResult{}, errors.New("down")
	}
	if g.gate.Load() {
		<-g.renewed
	}
	return g.Store.Acquire(ctx, req)
}

func (g *gatedStore) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if g.down.Load() {
		return nil, errors.New("down")
	}
	r, err := g.Store.Renew(ctx, owner, ttl, items)
	if g.gate.Load() {
		g.once.Do(func() { close(g.renewed) })
	}
	return r, err
}

func (g *gatedStore) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if g.down.Load() {
		return nil, errors.New("down")
	}
	return g.Store.List(ctx, prefix)
}

type causes struct {
	tenure.NopObserver
	mu sync.Mutex
	n  map[string]int
}

func (c *causes) Handover(cause string) {
	c.mu.Lock()
	c.n[cause]++
	c.mu.Unlock()
}

func TestOneLostTermIsCountedAsOneHandover(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		g := &gatedStore{Store: st, renewed: make(chan struct{})}
		obs := &causes{n: map[string]int{}}
		a := newReplica(t, g, "A", func(c *tenure.Config) { c.Observer = obs })
		a.Set("k", tenure.Job{Runner: a.rec.runner("a")})
		a.start()
		defer a.stop()
		advance(time.Second)
		g.down.Store(true)
		advance(ttl + grace + time.Second)
		b := newReplica(t, st, "B")
		b.Set("k", tenure.Job{Runner: b.rec.runner("b")})
		b.start()
		defer b.stop()
		advance(time.Second)
		g.gate.Store(true)
		g.down.Store(false)
		advance(2 * renew)
		obs.mu.Lock()
		defer obs.mu.Unlock()
		total := 0
		for _, n := range obs.n {
			total += n
		}
		if total != 1 {
			t.Fatalf("one lost term reported as %d handovers: %v", total, obs.n)
		}
	})
}
