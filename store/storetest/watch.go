package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// WatchHarness tells [RunWatchTests] how to drive a store's
// [store.Watcher].
type WatchHarness struct {
	// New returns an empty store, isolated as Harness.New's are, that
	// implements store.Watcher.
	New func(t *testing.T) store.Store

	// Peer, when set, returns another store on the same data as s: another
	// handle, connection or client, as a peer process would have. Changes
	// made through it must reach s's watches.
	Peer func(t *testing.T, s store.Store) store.Store

	// Wait is how long an event may take to arrive. Zero means 5s.
	Wait time.Duration
}

// RunWatchTests runs the tests of stores whose watches are complete, which
// go beyond the conformance suite's: every acquisition and release of a key
// under the prefix committed after Watch returned arrives, in order, with
// its owner and epoch, unless the reader fell behind; nothing else under the
// prefix (a renewal, a release of a term that is not current) and nothing
// outside it does. Closing the store, or ending the ctx, closes the
// channel; a reader that never reads blocks no writer, and a reader that
// fell behind either gets a Missed event after the last event dropped or
// finds its channel closed.
func RunWatchTests(t *testing.T, h WatchHarness) {
	if h.New == nil {
		t.Fatal("storetest: WatchHarness.New is required")
	}
	if h.Wait <= 0 {
		h.Wait = 5 * time.Second
	}
	w := watchSuite{h}
	for _, tt := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"AcquisitionsAndReleasesArriveInOrder", w.testAcquisitionsAndReleasesArriveInOrder},
		{"ChangesThroughAPeerArrive", w.testChangesThroughAPeerArrive},
		{"ChannelClosesWhenItsContextEnds", w.testChannelClosesWhenItsContextEnds},
		{"ChannelsAreClosedWhenCloseReturns", w.testChannelsAreClosedWhenCloseReturns},
		{"AReaderThatNeverReadsBlocksNoWriter", w.testAReaderThatNeverReadsBlocksNoWriter},
		{"AReaderThatFellBehindHearsItMissedEvents", w.testAReaderThatFellBehindHearsItMissedEvents},
	} {
		t.Run(tt.name, tt.fn)
	}
}

type watchSuite struct{ h WatchHarness }

// ttl is long enough that no term of these tests expires.
const watchTTL = time.Minute

func (w watchSuite) fresh(t *testing.T) (store.Store, store.Watcher) {
	t.Helper()
	s := w.h.New(t)
	wt, ok := s.(store.Watcher)
	if !ok {
		t.Fatalf("WatchHarness.New returned a %T, which does not implement store.Watcher", s)
	}
	return s, wt
}

func (w watchSuite) watch(t *testing.T, wt store.Watcher, ctx context.Context, prefix string) <-chan store.Event {
	t.Helper()
	ch, err := wt.Watch(ctx, prefix)
	if err != nil {
		t.Fatalf("Watch(%q): %v", prefix, err)
	}
	return ch
}

func (w watchSuite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 6*w.h.Wait)
	t.Cleanup(cancel)
	return ctx
}

func (w watchSuite) acquire(t *testing.T, s store.Store, key, owner string) int64 {
	t.Helper()
	res, err := s.Acquire(w.ctx(t), store.AcquireRequest{Key: key, Owner: owner, TTL: watchTTL, Grace: time.Second, Running: true})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire(key %q, owner %q) = %+v, %v; want a new term", key, owner, res, err)
	}
	return res.Epoch
}

func (w watchSuite) release(t *testing.T, s store.Store, owner string, terms ...store.Term) {
	t.Helper()
	if err := s.Release(w.ctx(t), owner, terms); err != nil {
		t.Fatalf("Release(owner %q, %v): %v", owner, terms, err)
	}
}

// expect reads the next events of ch and compares them with want.
func (w watchSuite) expect(t *testing.T, ch <-chan store.Event, want ...store.Event) {
	t.Helper()
	for i, wev := range want {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("the watch channel closed before event %d, %+v", i+1, wev)
			}
			if ev != wev {
				t.Fatalf("event %d: %+v, want %+v", i+1, ev, wev)
			}
		case <-time.After(w.h.Wait):
			t.Fatalf("no event %d within %v, want %+v", i+1, w.h.Wait, wev)
		}
	}
}

func (w watchSuite) testAcquisitionsAndReleasesArriveInOrder(t *testing.T) {
	s, wt := w.fresh(t)
	ch := w.watch(t, wt, w.ctx(t), "w/")
	w.acquire(t, s, "x/1", "a") // outside the prefix
	e1 := w.acquire(t, s, "w/1", "a")
	// A renewal, whatever its runner state, is no event.
	for _, running := range []bool{true, false} {
		if ok, err := s.Renew(w.ctx(t), "a", watchTTL, []store.RenewItem{{Key: "w/1", Epoch: e1, Running: running}}); err != nil || !ok[0] {
			t.Fatalf("Renew(w/1, epoch %d) = %v, %v", e1, ok, err)
		}
	}
	w.release(t, s, "a", store.Term{Key: "w/1", Epoch: e1 + 5}) // not the term: no event
	w.release(t, s, "a", store.Term{Key: "w/1", Epoch: e1})
	e2 := w.acquire(t, s, "w/1", "c")
	long := "w/" + strings.Repeat(`"\é{}%`, 70) // characters encodings must escape
	e3 := w.acquire(t, s, long, "d")
	w.expect(t, ch,
		store.Event{Kind: store.Acquired, Key: "w/1", Owner: "a", Epoch: e1},
		store.Event{Kind: store.Released, Key: "w/1", Owner: "a", Epoch: e1},
		store.Event{Kind: store.Acquired, Key: "w/1", Owner: "c", Epoch: e2},
		store.Event{Kind: store.Acquired, Key: long, Owner: "d", Epoch: e3},
	)
	select {
	case ev, open := <-ch:
		if open {
			t.Errorf("unexpected event %+v", ev)
		}
	case <-time.After(w.h.Wait / 20):
	}
}

func (w watchSuite) testChangesThroughAPeerArrive(t *testing.T) {
	if w.h.Peer == nil {
		t.Skip("WatchHarness.Peer is nil")
	}
	s, wt := w.fresh(t)
	peer := w.h.Peer(t, s)
	ch := w.watch(t, wt, w.ctx(t), "")
	e := w.acquire(t, peer, "job", "p")
	w.release(t, peer, "p", store.Term{Key: "job", Epoch: e})
	w.expect(t, ch,
		store.Event{Kind: store.Acquired, Key: "job", Owner: "p", Epoch: e},
		store.Event{Kind: store.Released, Key: "job", Owner: "p", Epoch: e},
	)
}

func (w watchSuite) testChannelClosesWhenItsContextEnds(t *testing.T) {
	s, wt := w.fresh(t)
	ctx, cancel := context.WithCancel(w.ctx(t))
	ended := w.watch(t, wt, ctx, "")
	other := w.watch(t, wt, w.ctx(t), "")
	cancel()
	if !closesWithin(ended, w.h.Wait) {
		t.Fatalf("the watch channel is still open %v after its ctx ended", w.h.Wait)
	}
	// The other watch goes on.
	e := w.acquire(t, s, "k", "a")
	w.expect(t, other, store.Event{Kind: store.Acquired, Key: "k", Owner: "a", Epoch: e})
}

func (w watchSuite) testChannelsAreClosedWhenCloseReturns(t *testing.T) {
	s, wt := w.fresh(t)
	cl, ok := s.(closer)
	if !ok {
		t.Skip("the store has no Close method")
	}
	var chans []<-chan store.Event
	for _, prefix := range []string{"", "", "k"} {
		chans = append(chans, w.watch(t, wt, w.ctx(t), prefix))
	}
	w.acquire(t, s, "k", "a") // an event may still be buffered
	if err := cl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, ch := range chans {
	drain:
		for {
			select {
			case _, open := <-ch:
				if !open {
					break drain
				}
			default:
				t.Errorf("watch %d is still open after Close returned", i)
				break drain
			}
		}
	}
}

// testAReaderThatNeverReadsBlocksNoWriter pins that events are dropped, not
// queued against writers, once a reader falls behind: more events than any
// store's buffer holds.
func (w watchSuite) testAReaderThatNeverReadsBlocksNoWriter(t *testing.T) {
	s, wt := w.fresh(t)
	w.watch(t, wt, w.ctx(t), "")
	const n = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			if res, err := s.Acquire(w.ctx(t), store.AcquireRequest{Key: "k", Owner: "a", TTL: watchTTL}); err != nil || !res.Acquired {
				t.Errorf("Acquire = %+v, %v", res, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(6 * w.h.Wait):
		t.Fatalf("%d acquisitions did not finish within %v beside a watch nobody reads", n, 6*w.h.Wait)
	}
}

// testAReaderThatFellBehindHearsItMissedEvents pins that no event is lost
// silently: a reader that fell behind more than any store's buffer holds
// finds, after every event it did not get, a Missed event (or the end of
// its channel, which tells it as much).
func (w watchSuite) testAReaderThatFellBehindHearsItMissedEvents(t *testing.T) {
	s, wt := w.fresh(t)
	ch := w.watch(t, wt, w.ctx(t), "w/")
	const n = 300
	for i := range n {
		w.acquire(t, s, fmt.Sprintf("w/%03d", i), "a")
	}
	// Read until a key acquired while reading arrives: everything sent
	// before it has been read then.
	var got []store.Event
	for i := 0; ; i++ {
		// Make room first, so that the end key is seldom dropped itself.
		if !drainReady(ch, &got) {
			return
		}
		end := fmt.Sprintf("w/end%03d", i)
		w.acquire(t, s, end, "a")
		if !w.readUntil(t, ch, end, &got) {
			return // closed: the reader knows it has to read the table
		}
		if len(got) > 0 && got[len(got)-1].Key == end {
			break
		}
	}
	pos := make(map[string]int, len(got))
	lastMissed := -1
	for i, ev := range got {
		if ev.Kind == store.Missed {
			lastMissed = i
			continue
		}
		pos[ev.Key] = i
	}
	lastReceivedBefore := -1 // position of the last event received before a dropped one
	for i := range n {
		key := fmt.Sprintf("w/%03d", i)
		if p, ok := pos[key]; ok {
			lastReceivedBefore = max(lastReceivedBefore, p)
			continue
		}
		if lastMissed <= lastReceivedBefore {
			t.Fatalf("the acquisition of %s never arrived and no Missed event followed the events before it (%d events read, last Missed at %d)", key, len(got), lastMissed)
		}
	}
}

// readUntil appends the events of ch to got until one for key arrives
// (true), a Missed event arrives after which nothing comes within Wait
// (true), or ch closes (false).
func (w watchSuite) readUntil(t *testing.T, ch <-chan store.Event, key string, got *[]store.Event) bool {
	t.Helper()
	for {
		select {
		case ev, open := <-ch:
			if !open {
				return false
			}
			*got = append(*got, ev)
			if ev.Key == key {
				return true
			}
		case <-time.After(w.h.Wait):
			if n := len(*got); n > 0 && (*got)[n-1].Kind == store.Missed {
				return true // the end key itself was dropped: try another
			}
			t.Fatalf("no event for %s within %v", key, w.h.Wait)
		}
	}
}

// drainReady appends the events ch holds now to got, without waiting; it
// reports false if ch closed.
func drainReady(ch <-chan store.Event, got *[]store.Event) bool {
	for {
		select {
		case ev, open := <-ch:
			if !open {
				return false
			}
			*got = append(*got, ev)
		default:
			return true
		}
	}
}
