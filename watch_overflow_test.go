package tenure_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// stallWatch models a store channel of capacity buf (store.Offer) whose
// reader stalls: while stalled, events pile up in that channel exactly as
// in the PostgreSQL/etcd (256) or SQLite (64) watchers.
type stallWatch struct {
	*readCounter
	buf      int
	perEvent time.Duration
	mu       sync.Mutex
	stall    chan struct{} // closed to resume
}

func (w *stallWatch) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	in, err := w.Store.Watch(ctx, prefix)
	if err != nil {
		return nil, err
	}
	q := make(chan store.Event, w.buf) // the store's channel
	out := make(chan store.Event)      // the supervisor's reader
	go func() {
		defer close(out)
		for {
			w.mu.Lock()
			stall := w.stall
			w.mu.Unlock()
			if stall != nil {
				// Reader stalled: the store Offers into q.
				select {
				case ev, ok := <-in:
					if !ok {
						return
					}
					store.Offer(q, ev)
					continue
				case <-stall:
					w.mu.Lock()
					w.stall = nil
					w.mu.Unlock()
					continue
				}
			}
			select {
			case ev := <-q:
				time.Sleep(w.perEvent) // the reader is slow: why it fell behind
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			default:
				select {
				case ev, ok := <-in:
					if !ok {
						return
					}
					select {
					case out <- ev:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// countAcquire counts a replica's acquisition calls.
type countAcquire struct {
	*stallWatch
	mu sync.Mutex
	n  int
}

func (c *countAcquire) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.stallWatch.Acquire(ctx, req)
}

func (c *countAcquire) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// A reader that fell behind finds its channel full of Missed events. Had
// each made every wanted key not held here due at once, a replica waiting
// for 50 singleton keys a peer holds would ask for all 50 again per Missed
// drained: 12,800 refused calls for one overflow of a 256-event buffer.
func TestOneOverflowOfTheWatchDoesNotMakeEveryWaitingKeyAskAgain(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		b := newReplica(t, st, "B")
		for i := range 50 {
			b.Set(fmt.Sprintf("job-%02d", i), tenure.Job{Runner: b.rec.runner("b")})
		}
		b.start()
		defer b.stop()
		advance(time.Minute)

		w := &countAcquire{stallWatch: &stallWatch{readCounter: &readCounter{Store: st}, buf: 256, perEvent: 5 * time.Millisecond}}
		a := newReplica(t, w, "A")
		for i := range 50 {
			a.Set(fmt.Sprintf("job-%02d", i), tenure.Job{Runner: a.rec.runner("a")})
		}
		a.start()
		defer a.stop()
		advance(time.Minute)
		w.take()
		advance(5 * time.Second)
		quiet := w.take()

		resume := make(chan struct{})
		w.mu.Lock()
		w.stall = resume
		w.mu.Unlock()
		for i := range 600 { // a burst elsewhere in the namespace
			st.Put(store.Lease{Key: fmt.Sprintf("other/k%03d", i), Owner: "X#1", Epoch: 1, TimeLeft: ttl})
		}
		advance(0)
		close(resume)
		advance(5 * time.Second)
		after := w.take()
		t.Logf("A's acquisition calls in 5 s: %d at rest, %d after one overflow of a 256-event buffer", quiet, after)
		if after > quiet+2*50 {
			t.Errorf("one overflow made A ask for keys a live peer holds %d times in 5 s (%d at rest)", after, quiet)
		}
	})
}
