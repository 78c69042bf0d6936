package postgres

import (
	"testing"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// freshStore makes the isolated stores of the shared suites.
func freshStore(t *testing.T) store.Store { return tables.New(t) }

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: freshStore, Advance: storetest.Sleep, LockKey: lockKey,
		// Terms share their owner's session (session.go).
		SharedExpiry: true})
}

func TestWatch(t *testing.T) {
	storetest.RunWatchTests(t, storetest.WatchHarness{New: freshStore, Peer: anotherPool})
}

// anotherPool opens a store with a pool of its own on s's table, as
// another process would.
func anotherPool(t *testing.T, s store.Store) store.Store {
	return tables.OpenTable(t, s.(*Store).table, false)
}
