package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			return openAt(t, filepath.Join(t.TempDir(), "leases.db"), Options{})
		},
		Advance: storetest.Sleep,
		Unit:    150 * time.Millisecond,
		// SQLite has no row locks; its write lock covers every row, which
		// is enough to show that a renewal queued behind a writer stamps
		// its expiry once it runs.
		LockKey: func(t *testing.T, s store.Store, _ string) func() {
			return lockDatabase(t, s.(*Store))
		},
	})
}
