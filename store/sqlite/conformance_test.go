package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// freshStore makes the isolated stores of the shared suites.
func freshStore(t *testing.T) store.Store { return openTemp(t, Options{}) }

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:     freshStore,
		Advance: storetest.Sleep,
		Unit:    150 * time.Millisecond,
		// Terms share their owner's session (session.go).
		SharedExpiry: true,
		// SQLite has no row locks; its write lock covers every row, which
		// is enough to show that a renewal queued behind a writer stamps
		// its expiry once it runs.
		LockKey: func(t *testing.T, s store.Store, _ string) func() {
			return lockDatabase(t, s.(*Store))
		},
	})
}

func TestWatch(t *testing.T) {
	storetest.RunWatchTests(t, storetest.WatchHarness{New: freshStore, Peer: anotherHandle})
}

// anotherHandle opens s's file again under another spelling of its path:
// the handle must share this process's watches all the same.
func anotherHandle(t *testing.T, s store.Store) store.Store {
	path := s.(*Store).path
	return openAt(t, filepath.Join(filepath.Dir(path), ".", filepath.Base(path)), Options{})
}
