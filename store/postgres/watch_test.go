package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// nextEvent waits for the next event or fails the test.
func nextEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return store.Event{}
}

func assertClosed(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch channel still open after 5s")
		}
	}
}

func TestWatchDeliversAReleaseMadeThroughAnotherStore(t *testing.T) {
	watching := newTestStore(t)
	peer := openTable(t, watching.table, false)
	// The peer creates the table; the watcher only listens.
	epoch := mustAcquire(t, peer, "job", "holder", ttl, grace)

	ch, err := watching.Watch(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Release(ctxT(t), "holder", []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	want := store.Event{Kind: store.Released, Key: "job", Owner: "holder", Epoch: epoch}
	if ev := nextEvent(t, ch); ev != want {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
	e2 := mustAcquire(t, peer, "job", "next", ttl, grace)
	want = store.Event{Kind: store.Acquired, Key: "job", Owner: "next", Epoch: e2}
	if ev := nextEvent(t, ch); ev != want {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
}

func TestWatchOnlyDeliversKeysWithThePrefix(t *testing.T) {
	s := newTestStore(t)
	ch, err := s.Watch(ctxT(t), "pool/")
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, "other", "a", ttl, grace)
	// A long key full of characters JSON must escape still round-trips.
	key := "pool/" + strings.Repeat(`"\é`, 100)
	epoch := mustAcquire(t, s, key, "a", ttl, grace)
	if ev := nextEvent(t, ch); ev.Key != key || ev.Kind != store.Acquired || ev.Epoch != epoch {
		t.Fatalf("event %+v, want the acquisition of %q", ev, key)
	}
}

func TestWatchEndsWhenItsContextEnds(t *testing.T) {
	s := newTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	assertClosed(t, ch)
}

func TestWatchEndsWhenTheStoreCloses(t *testing.T) {
	s := openTable(t, randomTable(), false)
	ch, err := s.Watch(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	assertClosed(t, ch)
}

func TestWatchEndsWhenItsConnectionBreaks(t *testing.T) {
	s := newTestStore(t)
	ch, err := s.Watch(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	var killed int
	err = s.pool.QueryRow(ctxT(t), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND query = $1`, "LISTEN "+s.ident).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listening backends: %v", killed, err)
	}
	assertClosed(t, ch)
}

func TestWatchDoesNotTakeAConnectionFromThePool(t *testing.T) {
	s := newTestStore(t)
	for range s.pool.Config().MaxConns + 1 {
		if _, err := s.Watch(ctxT(t), ""); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, s, "job", "a", ttl, grace)
}
