package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func nextEvent(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(2 * time.Second):
		t.Fatal("no event within 2s")
	}
	return store.Event{}
}

func noEvent(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestWatchSeesReleasesMadeThroughAnotherHandleOfTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.db")
	a := openAt(t, path, Options{})
	b := openAt(t, filepath.Join(dir, ".", "leases.db"), Options{})
	otherTable := openAt(t, path, Options{Table: "other_leases"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := b.Watch(ctx, "job/")
	if err != nil {
		t.Fatal(err)
	}
	otherEvs, err := otherTable.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	mustAcquire(t, a, "unwatched", "a")
	e := mustAcquire(t, a, "job/1", "a")
	if ev := nextEvent(t, evs); ev != (store.Event{Kind: store.Acquired, Key: "job/1", Owner: "a", Epoch: e}) {
		t.Fatalf("first event %+v", ev)
	}
	// A release of a term that is not current is not an event.
	if err := a.Release(ctx, "a", []store.Term{{Key: "job/1", Epoch: e + 5}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, "a", []store.Term{{Key: "job/1", Epoch: e}}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, evs); ev != (store.Event{Kind: store.Released, Key: "job/1", Owner: "a", Epoch: e}) {
		t.Fatalf("second event %+v", ev)
	}
	noEvent(t, evs)
	noEvent(t, otherEvs)
}

func TestWatchChannelClosesWithItsContextAndWithTheStore(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range first { // drains until closed; fails by timeout otherwise
	}
	mustAcquire(t, s, "k", "o")
	nextEvent(t, second)
	s.Close()
	for range second {
	}
}

func TestASlowWatcherDoesNotBlockWriters(t *testing.T) {
	s := openTemp(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.Watch(ctx, ""); err != nil { // never read
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2*watchBuffer; i++ {
			mustAcquire(t, s, "k", "o")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("acquisitions blocked behind a watcher nobody reads")
	}
}
