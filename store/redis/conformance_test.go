package redis

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
		Unit:    200 * time.Millisecond,
	})
}
