package tenure

import (
	"container/heap"
	"sync"
	"time"
)

// watchdogs fires the watchdog of every leased run when it comes due: one
// timer for them all, over a heap of the runs by when each is due. A
// time.AfterFunc per run cost each held key a timer of its own (about 125
// bytes, an eighth of a held key's heap at 10,000 keys), and when the
// renewals came late every one of them fired at once, each in a goroutine
// of its own, all waiting for the keeper's lock. Here the runs due at one
// moment are handled in turn by one goroutine, which stops every one of
// them before it reports any (fire).
//
// A watchdog moved later, what every renewal does, is not moved in the
// heap: its entry comes due at the earlier time and is put back for the
// later one then. A renewal thus costs each run a lock and a store, not a
// walk down the heap (which made a renewal of 10,000 keys 1 ms slower
// than resetting 10,000 timers), and the runs renewed together are put
// back together, by one goroutine, off the renewal's path.
//
// Lock order: a run's mu, then watchdogs.mu; fire takes no run's lock
// while it holds watchdogs.mu.
type watchdogs struct {
	fire func(due []*runState) // runs in the timer's goroutine
	base time.Time             // runState.due counts from here

	mu    sync.Mutex
	due   dueHeap
	timer *time.Timer
	armed time.Time // when timer fires; zero while it is not set
}

func newWatchdogs(fire func(due []*runState)) *watchdogs {
	return &watchdogs{fire: fire, base: time.Now()}
}

// set makes r's watchdog due at at, on time.Now's clock, read as now.
// r.mu is held.
func (w *watchdogs) set(r *runState, at, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.armedFor = at
	due := w.offset(at, now)
	switch {
	case r.slot < 0:
		r.due = due
		heap.Push(&w.due, r)
	case due < r.due:
		r.due = due
		heap.Fix(&w.due, int(r.slot))
	default:
		return // later: put back when its entry comes due
	}
	if w.armed.IsZero() || at.Before(w.armed) {
		w.armTimerLocked(at)
	}
}

// remove takes r's watchdog off. r.mu is held.
func (w *watchdogs) remove(r *runState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.slot >= 0 {
		heap.Remove(&w.due, int(r.slot))
	}
	if len(w.due) == 0 && w.timer != nil {
		// Nothing left to watch (the last run stopped, say at shutdown):
		// no fire after it.
		w.timer.Stop()
		w.armed = time.Time{}
	}
	// Otherwise the timer may now fire for nothing; it then sets itself
	// for the next run due, which costs less than keeping it exact here.
}

// fired is the timer's function: it takes off every run due by now, sets
// the timer for the next, and hands the runs to fire.
func (w *watchdogs) fired() {
	w.mu.Lock()
	t := time.Now()
	now := t.Sub(w.base)
	var due []*runState
	for n := 1; len(w.due) > 0 && w.due[0].due <= now; n++ {
		if n%putBackChunk == 0 {
			// Put back 10,000 entries in one hold and a renewal's set, or
			// a stop's remove, waits 1–2 ms for the lock.
			w.mu.Unlock()
			w.mu.Lock()
		}
		r := heap.Pop(&w.due).(*runState)
		if later := w.offset(r.armedFor, t); later > now {
			r.due = later // moved later since it was put here
			heap.Push(&w.due, r)
			continue
		}
		due = append(due, r)
	}
	w.armed = time.Time{}
	if len(w.due) > 0 {
		w.armTimerLocked(w.base.Add(w.due[0].due))
	}
	w.mu.Unlock()
	if len(due) > 0 {
		w.fire(due)
	}
}

// offset is at as an offset from w.base, measured from now: from base to
// now on the monotonic clock, and from now to at on whichever clock at
// carries, so a time without a monotonic reading is as exposed to a
// clock step as it was to a timer set for it, not since base.
func (w *watchdogs) offset(at, now time.Time) time.Duration {
	return now.Sub(w.base) + at.Sub(now)
}

// putBackChunk is how many entries fired takes off the heap per hold of
// the lock.
const putBackChunk = 1024

// armTimerLocked sets the timer to fire at at. w.mu is held.
func (w *watchdogs) armTimerLocked(at time.Time) {
	w.armed = at
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(at), w.fired)
		return
	}
	w.timer.Reset(time.Until(at))
}

// dueHeap orders runs by when their watchdogs are due; each run knows its
// place in it (runState.slot, -1 when not in it), so a run's watchdog is
// moved or taken off without a search.
type dueHeap []*runState

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot, h[j].slot = int32(i), int32(j)
}

func (h *dueHeap) Push(x any) {
	r := x.(*runState)
	r.slot = int32(len(*h))
	*h = append(*h, r)
}

func (h *dueHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.slot = -1
	return r
}
