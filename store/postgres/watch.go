package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/store"
)

// watchBuffer is how many events a slow reader may fall behind before
// events are dropped and a Missed event says so (store.Offer).
const watchBuffer = 256

// Watch listens on the table's NOTIFY channel over a connection of its own
// (taken out of the pool) and delivers release and acquisition events for
// keys starting with prefix. It does not reconnect: when the connection
// breaks, or ctx is done, or the store is closed, the channel is closed and
// the caller falls back to polling (and may watch again).
func (s *Store) Watch(ctx context.Context, prefix string) (_ <-chan store.Event, err error) {
	defer func() { err = denied(err) }()
	if s.watches.Closed() {
		return nil, store.ErrClosed
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: watch: %w", err)
	}
	// Hijacked, the connection no longer counts against the pool and
	// Close of the pool does not touch it: the watch goroutine owns it.
	conn := pc.Hijack()
	// LISTEN before returning, so no release committed after Watch returns
	// is missed.
	if _, err := conn.Exec(ctx, "LISTEN "+s.ident); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("postgres: watch: listen: %w", err)
	}

	wctx, cancel := context.WithCancel(ctx)
	done, ok := s.watches.Add(cancel) // Close cancels every watch
	if !ok {
		cancel()
		closeConn(conn)
		return nil, store.ErrClosed
	}

	ch := make(chan store.Event, watchBuffer)
	go func() {
		defer func() {
			cancel()
			closeConn(conn)
			close(ch)
			done()
		}()
		for {
			n, err := conn.WaitForNotification(wctx)
			if err != nil {
				return // ctx done, store closed or connection broken
			}
			ev, ok := parseEvent(n.Payload)
			if !ok || !strings.HasPrefix(ev.Key, prefix) {
				continue
			}
			store.Offer(ch, ev) // behind: the reader hears it missed events
		}
	}()
	return ch, nil
}

// closeConn closes a hijacked connection and waits until pgx's own cleanup
// of it has finished, so no goroutine of the watch outlives it.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
	select {
	case <-conn.PgConn().CleanupDone():
	case <-ctx.Done():
	}
}

// eventPayload is the JSON built by the eventJSON SQL fragment.
type eventPayload struct {
	Kind  string `json:"e"`
	Key   string `json:"k"`
	Owner string `json:"o"`
	Epoch int64  `json:"n"`
}

func parseEvent(payload string) (store.Event, bool) {
	var p eventPayload
	if err := json.Unmarshal([]byte(payload), &p); err != nil {
		return store.Event{}, false
	}
	ev := store.Event{Key: p.Key, Owner: p.Owner, Epoch: p.Epoch}
	switch p.Kind {
	case "released":
		ev.Kind = store.Released
	case "acquired":
		ev.Kind = store.Acquired
	default:
		return store.Event{}, false
	}
	return ev, true
}
