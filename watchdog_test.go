package tenure

import (
	"maps"
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
		w := newWatchdogs(nil)
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
			w.set(r, start.Add(after), time.Now())
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
		if n := dueCount(w); n != 0 || len(batches) != len(want) {
			t.Errorf("%d runs left due, %d batches %v", n, len(batches), batches)
		}
		w.mu.Lock()
		for _, r := range []*runState{a, b, c, d, e, f} {
			if r.slot != -1 {
				t.Errorf("run %s still has slot %d", r.key, r.slot)
			}
		}
		w.mu.Unlock()
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

// TestWatchdogsAfterTheLastIsTakenOffAndForTimesMovedBack covers the
// edges: the timer stopped when the last run is taken off and started
// again by the next; a time already past fires at once; a run moved later
// and then back earlier fires at the earlier time, and one moved later
// and later again fires at the last.
func TestWatchdogsAfterTheLastIsTakenOffAndForTimesMovedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		fired := map[string]time.Duration{}
		w := newWatchdogs(func(due []*runState) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range due {
				fired[r.key] = time.Since(start)
			}
		})
		set := func(r *runState, after time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			w.set(r, start.Add(after), time.Now())
		}
		a := &runState{key: "a", slot: -1, dogs: w}
		set(a, time.Second)
		a.mu.Lock()
		w.remove(a)
		a.mu.Unlock()
		if w.timer.Stop() {
			t.Error("the timer still ran with no run left to watch")
		}
		b := &runState{key: "b", slot: -1, dogs: w}
		c := &runState{key: "c", slot: -1, dogs: w}
		d := &runState{key: "d", slot: -1, dogs: w}
		e := &runState{key: "e", slot: -1, dogs: w}
		set(b, 3*time.Second)
		set(c, 2*time.Second)
		set(c, 5*time.Second) // later: keeps its place, put back at 2s
		set(c, time.Second)   // then earlier than its place
		set(d, 2*time.Second)
		set(d, 4*time.Second)
		set(d, 6*time.Second)
		time.Sleep(1500 * time.Millisecond)
		set(e, -time.Second) // already past
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		want := map[string]time.Duration{"b": 3 * time.Second, "c": time.Second, "d": 6 * time.Second, "e": 1500 * time.Millisecond}
		if !maps.Equal(fired, want) {
			t.Errorf("fired %v, want %v", fired, want)
		}
	})
}

// dueCount counts the runs on w's heap under its lock, as the timer's
// goroutine writes it: a read without the lock was reported as a race.
func dueCount(w *watchdogs) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.due)
}

// TestWatchdogsPutBackMoreThanOneHoldOfTheLockTakes: runs all moved later
// together, more than fired takes off the heap per hold of its lock, are
// all put back when their first time comes, and all fire at the later.
func TestWatchdogsPutBackMoreThanOneHoldOfTheLockTakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3*putBackChunk + 7
		start := time.Now()
		var mu sync.Mutex
		var fired []time.Duration
		w := newWatchdogs(func(due []*runState) {
			mu.Lock()
			defer mu.Unlock()
			for range due {
				fired = append(fired, time.Since(start))
			}
		})
		runs := make([]*runState, n)
		for i := range runs {
			runs[i] = &runState{slot: -1, dogs: w}
			w.set(runs[i], start.Add(time.Second), start)
		}
		for _, r := range runs {
			w.set(r, start.Add(3*time.Second), start)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		if due := dueCount(w); len(fired) != 0 || due != n {
			t.Errorf("at 2s: %d fired, %d of %d due later", len(fired), due, n)
		}
		mu.Unlock()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(fired) != n || fired[0] != 3*time.Second || fired[n-1] != 3*time.Second {
			t.Errorf("%d of %d fired, first at %v", len(fired), n, fired[:min(1, len(fired))])
		}
	})
}

// BenchmarkWatchdogs10000Runs compares the shared timer with a timer per
// run, the design it replaced, at 10,000 runs: setting every watchdog
// (what acquiring 10,000 keys does, and its memory), moving every one a
// period later (what a renewal at the default timing does, and, for the
// shared timer, putting each back once its earlier time comes), and every
// one coming due at once (what a late renewal makes happen).
//
//	go test -run '^$' -bench Watchdogs10000Runs -benchmem .
func BenchmarkWatchdogs10000Runs(b *testing.B) {
	const n = 10_000
	runs := make([]*runState, n)
	for i := range runs {
		runs[i] = &runState{slot: -1}
	}
	// Due far ahead, so that nothing fires while the watchdogs are set
	// and moved.
	later := func(now time.Time, i int) time.Time { return now.Add(time.Hour + time.Duration(i)) }
	b.Run("set/shared-timer", func(b *testing.B) {
		for b.Loop() {
			w := newWatchdogs(func([]*runState) {})
			now := time.Now()
			for i, r := range runs {
				r.slot = -1
				w.set(r, later(now, i), now)
			}
			w.timer.Stop()
		}
	})
	b.Run("set/timer-per-run", func(b *testing.B) {
		timers := make([]*time.Timer, n)
		for b.Loop() {
			now := time.Now()
			for i := range timers {
				timers[i] = time.AfterFunc(later(now, i).Sub(now), func() {})
			}
			for _, t := range timers {
				t.Stop()
			}
		}
	})
	b.Run("move/shared-timer", func(b *testing.B) {
		w := newWatchdogs(func([]*runState) {})
		now := time.Now()
		for i, r := range runs {
			r.slot = -1
			w.set(r, later(now, i), now)
		}
		defer w.timer.Stop()
		for b.Loop() {
			now := time.Now()
			for i, r := range runs {
				w.set(r, later(now, i), now)
			}
		}
	})
	b.Run("move/timer-per-run", func(b *testing.B) {
		timers := make([]*time.Timer, n)
		now := time.Now()
		for i := range timers {
			timers[i] = time.AfterFunc(later(now, i).Sub(now), func() {})
		}
		defer func() {
			for _, t := range timers {
				t.Stop()
			}
		}()
		for b.Loop() {
			now := time.Now()
			for i, t := range timers {
				t.Reset(later(now, i).Sub(now))
			}
		}
	})
	// What the moves above leave for later: each entry comes due at its
	// earlier time and is put back, by the timer's goroutine.
	b.Run("put-back/shared-timer", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			// Runs of its own, due late enough that the timer does not
			// fire before they are all moved and it is stopped.
			w := newWatchdogs(func([]*runState) { b.Error("none is due") })
			now := time.Now()
			at := now.Add(100 * time.Millisecond)
			own := make([]*runState, n)
			for i := range own {
				own[i] = &runState{slot: -1}
				w.set(own[i], at, now)
			}
			for i, r := range own {
				w.set(r, later(now, i), now)
			}
			w.timer.Stop()
			time.Sleep(time.Until(at))
			b.StartTimer()
			w.fired()
			b.StopTimer()
			w.timer.Stop() // set for the runs put back, an hour ahead
			b.StartTimer()
		}
	})
	b.Run("all-due/shared-timer", func(b *testing.B) {
		for b.Loop() {
			var fired sync.WaitGroup
			fired.Add(n)
			w := newWatchdogs(func(due []*runState) { fired.Add(-len(due)) })
			now := time.Now()
			at := now.Add(time.Millisecond)
			for _, r := range runs {
				r.slot = -1
				w.set(r, at, now)
			}
			fired.Wait()
		}
	})
	b.Run("all-due/timer-per-run", func(b *testing.B) {
		for b.Loop() {
			var fired sync.WaitGroup
			fired.Add(n)
			at := time.Now().Add(time.Millisecond)
			for range n {
				time.AfterFunc(time.Until(at), fired.Done)
			}
			fired.Wait()
		}
	})
}
