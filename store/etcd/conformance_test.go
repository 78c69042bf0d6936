package etcd

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// TestConformance runs the shared suite on whole seconds: etcd leases have
// a TTL of whole seconds with a floor of 2s, so the suite's shortest term
// (2 units, in the randomized test) must be 2s. The tolerance covers the
// half second TimeToLive's rounding may be off and the leader's 500ms
// expiry tick.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New:       func(t *testing.T) store.Store { return newTestStore(t) },
		Advance:   storetest.Sleep,
		Unit:      time.Second,
		Tolerance: 750 * time.Millisecond,
	})
}
