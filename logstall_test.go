package tenure_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A log sink that blocks (a full stderr pipe, a stuck log shipper) must
// cost log lines, never work. Here A's sink stalls, and a renewal fails
// in a blip of the store: the renewal loop logs that, and must retry
// rather than wait for the sink, so A keeps its key past the deadline the
// failed renewal left it. A key set on A meanwhile must
// start, although the loop that acquires it logs as it does.
func TestAStalledLogSinkCostsNoLease(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		g, runs, a, stop := aWithAStallableLog(t, st, st)
		defer stop()

		advance(renew) // A's renewal at this moment is confirmed
		g.stall()
		var blip atomic.Bool
		st.SetFault(func(op string) error {
			if op == memstore.OpRenew && blip.CompareAndSwap(false, true) {
				return errors.New("unreachable")
			}
			return nil
		})
		advance(renew) // the next renewal fails, and A logs it to the stalled sink
		a.Set("discord", tenure.Job{Runner: runs.runner("A")})
		advance(3 * (ttl + grace))

		wantNoOverlap(t, runs)
		for _, key := range []string{"telegram", "discord"} {
			got := runs.of(key)
			if len(got) != 1 || got[0].replica != "A" || !got[0].ended.IsZero() {
				t.Fatalf("runs of %s with A's log stalled: %+v, want one run on A, still going", key, got)
			}
		}
	})
}

// aWithAStallableLog starts A, on aStore, whose log sink g can stall, and
// B, on st, both running telegram, recorded in runs; stop opens the sink
// and stops both.
func aWithAStallableLog(t *testing.T, aStore store.Store, st *memstore.Store) (g *gate, runs *runLog, a *replica, stop func()) {
	g, runs = &gate{}, &runLog{}
	a = newReplica(t, aStore, "A", withLogger(g.logger()))
	a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
	a.start()
	b := newReplica(t, st, "B")
	b.Set("telegram", tenure.Job{Runner: runs.runner("B")})
	b.start()
	return g, runs, a, func() {
		g.open()
		a.stop()
		b.stop()
	}
}

// hookObs runs hook, once, when Run reports that nothing is held any more
// (as it ends).
type hookObs struct {
	tenure.NopObserver
	mu   sync.Mutex
	hook func()
}

func (h *hookObs) Keys(k []tenure.KeyState) {
	h.mu.Lock()
	f := h.hook
	h.hook = nil
	h.mu.Unlock()
	if k == nil && f != nil {
		f()
	}
}

// A Run is not over until it is done with its log queue: one started
// while the last winds down is refused, and one started after it returns
// has a queue of its own, so a stalled sink holds up none of its starts.
func TestARunAfterAnotherKeepsItsLogQueue(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		obs := &hookObs{}
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()), func(c *tenure.Config) { c.Observer = obs })
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		advance(renew)

		var during error
		obs.mu.Lock()
		obs.hook = func() {
			ctx, cancel := context.WithTimeout(context.Background(), renew) // ends if it does run
			defer cancel()
			during = a.Run(ctx)
		}
		obs.mu.Unlock()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !errors.Is(during, tenure.ErrAlreadyRunning) {
			t.Fatalf("a Run started while the last one ended: %v, want ErrAlreadyRunning", during)
		}

		ctx, cancel = context.WithCancel(context.Background())
		go func() { done <- a.Run(ctx) }()
		defer func() {
			g.open()
			cancel()
			<-done
		}()
		g.stall()
		a.Set("discord", tenure.Job{Runner: runs.runner("A")})
		advance(3 * renew)
		if got := runs.of("discord"); len(got) != 1 {
			t.Fatalf("with A's log stalled in its second Run, discord's runs: %+v; want it started", got)
		}
	})
}
