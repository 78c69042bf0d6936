package memstore_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
	"github.com/tenure-dev/tenure/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a store's injected clock; it moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newStore returns a store on its own fake clock.
func newStore() (*memstore.Store, *fakeClock) {
	clk := newFakeClock()
	return memstore.New(memstore.Options{Clock: clk.Now}), clk
}

func TestConformance(t *testing.T) {
	var clocks sync.Map // *memstore.Store → *fakeClock
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s, clk := newStore()
			clocks.Store(s, clk)
			t.Cleanup(func() { clocks.Delete(s) })
			return s
		},
		Advance: func(t *testing.T, s store.Store, d time.Duration) {
			clk, ok := clocks.Load(s)
			if !ok {
				t.Fatalf("Advance on a store this harness did not make")
			}
			clk.(*fakeClock).Advance(d)
		},
		// Time is free, so a long unit costs nothing and makes every
		// margin in the suite generous.
		Unit:           time.Second,
		Tolerance:      time.Nanosecond, // the clock stands still between calls
		InstantAdvance: true,
	})
}

func TestWatch(t *testing.T) {
	storetest.RunWatchTests(t, storetest.WatchHarness{
		// A buffer smaller than the suite's bursts, so that falling behind
		// is tested here too.
		New: func(t *testing.T) store.Store { return memstore.New(memstore.Options{WatchBuffer: 64}) },
	})
}
