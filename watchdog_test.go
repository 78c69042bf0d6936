package tenure

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestWatchdogsFireEachRunWhenDueAndNoneTakenOff drives the one timer
// behind every run's watchdog: runs set out of order fire in order, each
// once and not before it is due; a run set later or earlier fires at its
// last time; a run taken off never fires; runs due together fire in one
// batch.
func TestWatchdogsFireEachRunWhenDueAndNoneTakenOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type firing struct {
			key string
			at  time.Duration
		}
		var mu sync.Mutex
		var got []firing
		var batches [][]string
		start := time.Now()
		w := &watchdogs{}
		w.fire = func(due []*runState) {
			mu.Lock()
			defer mu.Unlock()
			var keys []string
			for _, r := range due {
				got = append(got, firing{r.key, time.Since(start)})
				keys = append(keys, r.key)
			}
			batches = append(batches, keys)
		}
		run := func(key string) *runState { return &runState{key: key, slot: -1, dogs: w} }
		set := func(r *runState, after time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			w.set(r, start.Add(after))
		}
		a, b, c, d, e, f := run("a"), run("b"), run("c"), run("d"), run("e"), run("f")
		set(c, 3*time.Second)
		set(a, 1*time.Second)
		set(b, 2*time.Second)
		set(d, 4*time.Second)
		set(e, 4*time.Second)
		set(f, 5*time.Second)
		set(b, 6*time.Second) // moved later
		set(d, 500*time.Millisecond)
		c.mu.Lock()
		w.remove(c) // taken off: it stopped
		c.mu.Unlock()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		want := []firing{{"d", 500 * time.Millisecond}, {"a", time.Second}, {"e", 4 * time.Second}, {"f", 5 * time.Second}, {"b", 6 * time.Second}}
		if !slices.Equal(got, want) {
			t.Errorf("fired %v, want %v", got, want)
		}
		if len(w.due) != 0 || len(batches) != len(want) {
			t.Errorf("%d runs left due, %d batches %v", len(w.due), len(batches), batches)
		}
		for _, r := range []*runState{a, b, c, d, e, f} {
			if r.slot != -1 {
				t.Errorf("run %s still has slot %d", r.key, r.slot)
			}
		}
		mu.Unlock()

		// Runs due at one moment fire in one batch.
		g, h := run("g"), run("h")
		set(g, 12*time.Second)
		set(h, 12*time.Second)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if last := slices.Sorted(slices.Values(batches[len(batches)-1])); !slices.Equal(last, []string{"g", "h"}) {
			t.Errorf("the last batch was %v, want [g h]", last)
		}
	})
}
