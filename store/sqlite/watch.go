package sqlite

import (
	"context"
	"strings"
	"sync"

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

// hub fans events out to the watchers of one table. It is never removed from
// hubs: it is a few words per distinct file, and keeping it avoids a race
// between a Store that drops the last watcher and one adding a new one.
type hub struct {
	mu       sync.Mutex
	watchers map[*watcher]struct{}
}

type watcher struct {
	prefix string
	ch     chan store.Event
}

func hubFor(path, table string) *hub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	k := hubKey{path, table}
	h := hubs[k]
	if h == nil {
		h = &hub{watchers: map[*watcher]struct{}{}}
		hubs[k] = h
	}
	return h
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
		select {
		case w.ch <- ev:
		default: // full: the watcher will learn it on its next poll
		}
	}
}

func (h *hub) add(w *watcher) {
	h.mu.Lock()
	h.watchers[w] = struct{}{}
	h.mu.Unlock()
}

func (h *hub) remove(w *watcher) {
	h.mu.Lock()
	delete(h.watchers, w)
	close(w.ch)
	h.mu.Unlock()
}

// Watch delivers acquisitions and releases of keys starting with prefix
// made through any Store of the same file and table in this process. Other
// processes' changes are not delivered. The channel is closed when ctx is
// done or the Store is closed.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.fail("watch", err)
	}
	// Under closeMu, so that Close either sees this watcher in its Wait or
	// this call sees the store closed.
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.isClosed() {
		return nil, s.fail("watch", store.ErrClosed)
	}
	w := &watcher{prefix: prefix, ch: make(chan store.Event, watchBuffer)}
	s.hub.add(w)
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
