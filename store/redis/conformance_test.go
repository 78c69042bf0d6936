package redis

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/storetesting"
	"github.com/tenure-dev/tenure/internal/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) store.Store { return newTestStore(t) },
		Advance: storetest.Sleep,
		Unit:    200 * time.Millisecond,
	})
}

func TestWatch(t *testing.T) {
	storetest.RunWatchTests(t, storetest.WatchHarness{
		New: func(t *testing.T) store.Store { return newTestStore(t) },
		// A client of its own on the namespace, as another process has.
		Peer: func(t *testing.T, s store.Store) store.Store {
			url, ns := testenv.Redis.URL(t), s.(*Store).namespace
			return storetesting.Open(t, func(ctx context.Context) (*Store, error) {
				return Open(ctx, url, Options{Namespace: ns})
			}, nil)
		},
	})
}
