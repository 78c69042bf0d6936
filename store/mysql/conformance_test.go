package mysql

import (
	"testing"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

func TestConformance(t *testing.T) {
	freshStore := func(t *testing.T) store.Store { return tables.New(t) }
	storetest.Run(t, storetest.Harness{New: freshStore, Advance: storetest.Sleep, LockKey: lockKey,
		// Terms share their owner's session (session.go).
		SharedExpiry: true})
}
