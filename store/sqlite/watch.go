package sqlite

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// watchBuffer is how many events a slow watcher may fall behind before
// events to it are dropped; events are hints, the engine's poll is the truth.
const watchBuffer = 64

// hubs holds one hub per (database file, table) in this process, so that
// every Store on the same file hears the others' releases.
var (
	hubsMu sync.Mutex
	hubs   = map[hubKey]*hub{}
)

type hubKey struct{ path, table string }

// hub fans events out to the watchers of one table: events of this
// process's Stores as they happen, and those of other processes as its
// poller finds them. It is never removed from hubs: it is a few words per
// distinct file, and keeping it avoids a race between a Store that drops the
// last watcher and one adding a new one.
type hub struct {
	// origin is written with every acquisition and release made through
	// this hub's Stores, so that its poller skips the changes already
	// published in-process and delivers each event once.
	origin int64

	mu       sync.Mutex
	watchers map[*watcher]struct{}

	// pollMu orders starting and stopping the poller; it is held across
	// both, so that the poller runs exactly while some watcher wants it.
	pollMu sync.Mutex
	poller *poller
}

type watcher struct {
	prefix string
	ch     chan store.Event
	poll   time.Duration // how often it wants other processes polled; <= 0: never
}

func hubFor(path, table string) *hub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	k := hubKey{path, table}
	h := hubs[k]
	if h == nil {
		h = newHub()
		hubs[k] = h
	}
	return h
}

func newHub() *hub {
	// Random, so that processes sharing a file tell their writes apart;
	// never 0, the origin of rows written before change numbering existed.
	origin := int64(rand.Uint64() >> 1)
	if origin == 0 {
		origin = 1
	}
	return &hub{origin: origin, watchers: map[*watcher]struct{}{}}
}

// publish sends ev to every matching watcher without blocking. The lock is
// held while sending so that a watcher is never closed mid-send.
func (h *hub) publish(ev store.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		if !strings.HasPrefix(ev.Key, w.prefix) {
			continue
		}
		store.Offer(w.ch, ev) // full: the watcher hears it missed events
	}
}

// pollEvery is the shortest poll interval any current watcher asks for, or
// 0 when none wants polling.
func (h *hub) pollEvery() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var every time.Duration
	for w := range h.watchers {
		if w.poll > 0 && (every == 0 || w.poll < every) {
			every = w.poll
		}
	}
	return every
}

// add registers w, first starting the poller if w wants one and none runs;
// start is called with ctx, so a file that cannot be read fails the Watch.
func (h *hub) add(ctx context.Context, w *watcher, start func(context.Context, time.Duration) (*poller, error)) error {
	h.pollMu.Lock()
	defer h.pollMu.Unlock()
	if w.poll > 0 && h.poller == nil {
		p, err := start(ctx, w.poll)
		if err != nil {
			return err
		}
		h.poller = p
	}
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	h.mu.Unlock()
	return nil
}

// remove unregisters w, stops the poller once no watcher wants it, and then
// closes w's channel: when a watcher sees its channel closed, the poller it
// may have been the last user of has already exited.
func (h *hub) remove(w *watcher) {
	h.pollMu.Lock()
	defer h.pollMu.Unlock()
	h.mu.Lock()
	delete(h.watchers, w)
	h.mu.Unlock()
	if h.poller != nil && h.pollEvery() == 0 {
		h.poller.stop()
		h.poller = nil
	}
	// No publish can reach w any more: it left the map under h.mu.
	close(w.ch)
}

// Watch delivers acquisitions and releases of keys starting with prefix.
// Those made through any Store of the same file and table in this process
// arrive as they happen; those committed by other processes arrive within
// about Options.WatchPoll, found by a poller that runs while any watch of the
// file and table is active here (none when WatchPoll is negative). The
// poller reads each key's latest state, so a key acquired and released again
// between two looks yields only the release, and a revocation yields
// nothing. No event is delivered twice, and every change committed after
// Watch returns is delivered unless the watcher's buffer is full. The
// channel is closed when ctx is done or the Store is closed.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.fail("watch", err)
	}
	// Under closeMu, so that Close either sees this watcher in its Wait or
	// this call sees the store closed.
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if err := s.writable("watch"); err != nil {
		// Its poller's connection would write (WAL checkpoints), and a
		// read-only Store serves List alone.
		return nil, err
	}
	w := &watcher{prefix: prefix, ch: make(chan store.Event, watchBuffer), poll: s.poll}
	if err := s.hub.add(ctx, w, s.startPoller); err != nil {
		return nil, s.fail("watch", err)
	}
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		s.hub.remove(w)
	}()
	return w.ch, nil
}
