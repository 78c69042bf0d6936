package mysql

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) store.Store { return newTestStore(t) },
		Advance: storetest.Sleep,
		// Large enough that a round trip to a busy local server (a few ms)
		// stays well inside the tolerance of Unit/4.
		Unit:    200 * time.Millisecond,
		LockKey: lockKey,
	})
}
