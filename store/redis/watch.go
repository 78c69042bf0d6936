package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
)

// watchPing is how long a subscription may stay silent before it is probed
// with a PING; a second silent period in a row means the connection is dead.
const watchPing = 15 * time.Second

// Watch subscribes to the namespace's event channel and delivers the events
// of keys that start with prefix. The channel is closed when ctx is done,
// when the store is closed or when the subscription fails; events published
// while nobody was subscribed are lost, so callers poll as well.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	ps := s.client.Subscribe(ctx, s.channel)
	// The first reply confirms the subscription, so no event published
	// after Watch returns can be missed.
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, s.wrap("subscribe", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done, ok := s.watches.Add(cancel) // Close cancels every watch
	if !ok {
		cancel()
		_ = ps.Close()
		return nil, store.ErrClosed
	}

	// Closing the PubSub is what interrupts a blocked read.
	stopOnDone := context.AfterFunc(wctx, func() { _ = ps.Close() })
	out := make(chan store.Event, 64)
	go func() {
		defer done()
		defer close(out)
		defer func() {
			cancel()
			if stopOnDone() {
				_ = ps.Close()
			}
		}()
		s.deliver(wctx, ps, prefix, out)
	}()
	return out, nil
}

// deliver forwards events until ctx is done or the subscription fails.
func (s *Store) deliver(ctx context.Context, ps *goredis.PubSub, prefix string, out chan<- store.Event) {
	probed := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, watchPing)
		if err != nil {
			var ne net.Error
			if ctx.Err() == nil && !probed && errors.As(err, &ne) && ne.Timeout() {
				if ps.Ping(ctx) == nil {
					probed = true
					continue
				}
			}
			return
		}
		probed = false
		m, ok := msg.(*goredis.Message)
		if !ok {
			continue // subscription confirmations and pongs
		}
		ev, err := parseEvent(m.Payload)
		if err != nil || !strings.HasPrefix(ev.Key, prefix) {
			continue
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// parseEvent reads "A|R \t epoch \t owner \t key": keys and owners never
// hold control characters, so a tab cannot occur inside them.
func parseEvent(payload string) (store.Event, error) {
	f := strings.SplitN(payload, "\t", 4)
	if len(f) != 4 {
		return store.Event{}, fmt.Errorf("malformed event %q", payload)
	}
	var kind store.EventKind
	switch f[0] {
	case "A":
		kind = store.Acquired
	case "R":
		kind = store.Released
	default:
		return store.Event{}, fmt.Errorf("unknown event kind %q", f[0])
	}
	epoch, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return store.Event{}, fmt.Errorf("malformed event epoch %q: %w", f[1], err)
	}
	return store.Event{Kind: kind, Key: f[3], Owner: f[2], Epoch: epoch}, nil
}
