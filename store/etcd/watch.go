package etcd

import (
	"context"
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/store"
)

// watchBuffer is how many events a slow reader may fall behind before
// events are dropped and a Missed event says so (store.Offer).
const watchBuffer = 256

// Watch watches the records of keys that start with prefix and delivers an
// Acquired event for every new term and a Released event for every
// release. The watch is established before Watch returns, so no change
// committed afterwards is missed while it lasts. The channel is closed when
// ctx is done, when the store is closed, or when the watch fails (the
// member lost its leader, or the history it needed was compacted). While
// the cluster is unreachable the client keeps retrying and the channel
// stays open and silent; it resumes without a gap when the cluster is back.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	done, ok := s.watches.Add(cancel) // Close cancels every watch
	if !ok {
		cancel()
		return nil, store.ErrClosed
	}

	// WithRequireLeader: a member cut off from its leader ends the watch
	// instead of keeping it open and silent.
	wch := s.client.Watch(clientv3.WithRequireLeader(wctx), s.root+prefix,
		clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	first, open := <-wch
	if !open || !first.Created || first.Err() != nil {
		err := first.Err()
		if err == nil {
			err = errors.New("the watch was not established")
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		done()
		drain(wch)
		return nil, s.wrap("watch", err)
	}

	out := make(chan store.Event, watchBuffer)
	go func() {
		defer func() {
			cancel() // ends the client's watch, which then closes wch
			drain(wch)
			close(out)
			done()
		}()
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				return
			}
			for _, ev := range resp.Events {
				e, ok := s.event(ev, prefix)
				if !ok {
					continue
				}
				store.Offer(out, e) // behind: the reader hears it missed events
			}
		}
	}()
	return out, nil
}

// drain empties a watch channel after its context was cancelled, so the
// client's goroutines that feed it can finish.
func drain(wch clientv3.WatchChan) {
	for range wch {
	}
}

// event turns a change of a record into an Event: a held record with a new
// epoch is an acquisition, a held record becoming released a release.
// Renewals (running flag) and revocations are not events.
func (s *Store) event(ev *clientv3.Event, prefix string) (store.Event, bool) {
	key, kind, ok := s.splitKey(ev.Kv.Key)
	if !ok || kind != kindRecord || !strings.HasPrefix(key, prefix) {
		return store.Event{}, false
	}
	s.noteRecord(key, ev)
	if ev.Type != mvccpb.PUT {
		return store.Event{}, false
	}
	rec, err := decodeRecord(key, ev.Kv)
	if err != nil {
		return store.Event{}, false
	}
	var prev *record
	if ev.PrevKv != nil {
		if p, err := decodeRecord(key, ev.PrevKv); err == nil {
			prev = &p
		}
	}
	switch {
	case rec.state == stateHeld && (prev == nil || prev.epoch != rec.epoch):
		return store.Event{Kind: store.Acquired, Key: key, Owner: rec.owner, Epoch: rec.epoch}, true
	case rec.state == stateReleased && (prev == nil || prev.state == stateHeld):
		return store.Event{Kind: store.Released, Key: key, Owner: rec.owner, Epoch: rec.epoch}, true
	}
	return store.Event{}, false
}
