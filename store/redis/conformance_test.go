package redis

import (
	"context"
	"testing"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// freshStore makes the isolated stores of the shared suites.
func freshStore(t *testing.T) store.Store { return newTestStore(t) }

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: freshStore, Advance: storetest.Sleep, SharedExpiry: true})
}

func TestWatch(t *testing.T) {
	storetest.RunWatchTests(t, storetest.WatchHarness{New: freshStore, Peer: anotherClient})
}

// anotherClient opens a store with a client of its own on s's namespace,
// as another process would.
func anotherClient(t *testing.T, s store.Store) store.Store {
	url, ns := testenv.Redis.URL(t), s.(*Store).namespace
	return testenv.Open(t, func(ctx context.Context) (*Store, error) {
		return Open(ctx, url, Options{Namespace: ns})
	}, nil)
}
