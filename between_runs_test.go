package tenure_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// liveRunners counts, per replica, the runners of a key that have not
// returned yet (winding down included), and the most at once.
type liveRunners struct {
	mu      sync.Mutex
	live    map[string]int
	most    map[string]int
	overlap bool // two replicas had runners at once
}

// runner returns a runner for replica that works until its context ends,
// then waits for windDown (if not nil) before it returns.
func (l *liveRunners) runner(replica string, windDown <-chan struct{}) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
		l.mu.Lock()
		l.live[replica]++
		l.most[replica] = max(l.most[replica], l.live[replica])
		others := 0
		for r, n := range l.live {
			if r != replica {
				others += n
			}
		}
		l.overlap = l.overlap || others > 0
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.live[replica]--
			l.mu.Unlock()
		}()
		<-ctx.Done()
		if windDown != nil {
			<-windDown
		}
		return nil
	})
}

// A runner that outlives Run's stop (it takes longer than StopTimeout)
// keeps its term. Removing the key and setting it again before the next
// Run — a configuration reloaded — forgot the record of that runner: the
// new record started a second runner on the same term, and once the old
// runner returned, its forgotten record released the term the new runner
// used, and a peer started at once.
func TestAKeyRemovedAndSetBetweenRunsWaitsForItsLastRunner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		l := &liveRunners{live: map[string]int{}, most: map[string]int{}}
		windDown := make(chan struct{})
		a := newReplica(t, st, "A")
		a.Set("k", tenure.Job{Runner: l.runner("A", windDown)})
		a.start()
		advance(time.Second)
		if err := a.stop(); !errors.Is(err, tenure.ErrStopTimeout) {
			t.Fatalf("the first Run: %v, want ErrStopTimeout (its runner still winds down)", err)
		}
		if err := a.Remove(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		a.Set("k", tenure.Job{Runner: l.runner("A", nil)})
		a.start()
		defer a.stop()
		b := newReplica(t, st, "B")
		b.Set("k", tenure.Job{Runner: l.runner("B", nil)})
		b.start()
		defer b.stop()
		advance(time.Second)
		close(windDown) // the first runner returns at last
		advance(3 * renew)

		l.mu.Lock()
		defer l.mu.Unlock()
		if l.most["A"] > 1 || l.overlap {
			t.Fatalf("A ran k %d times at once, and A and B at once: %v; want one runner at a time", l.most["A"], l.overlap)
		}
		if l.live["A"]+l.live["B"] != 1 {
			t.Errorf("runners of k at the end: %v; want one", l.live)
		}
	})
}
