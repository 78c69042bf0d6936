package sessiontest

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// AnOldTableIsReadThenMigrated checks a table made before sessions that
// holds owner a's term k at epoch: ro, a read-only Store on it, lists the
// term as it is; w, a Store that may write (it migrated the table when it
// opened), renews it term by term onto a session and then on the session
// alone, and ro follows: k has about a minute left, not a century.
func (h Harness) AnOldTableIsReadThenMigrated(t *testing.T, ro store.Store, open func() Store, epoch int64) {
	t.Helper()
	if l := LeaseOf(t, ro, "k"); !l.Live || l.Owner != "a" || l.Epoch != epoch {
		t.Fatalf("read-only List of the old table: %+v", l)
	}
	w := open()
	k := store.Term{Key: "k", Epoch: epoch}
	if got, slow := h.Renew(t, w, "a", time.Minute, k); !got[0] || !slow {
		t.Fatalf("renewal of a term from before sessions: %v, slow %t; want renewed, term by term", got, slow)
	}
	if l := LeaseOf(t, ro, "k"); !l.Live || l.TimeLeft > time.Minute {
		t.Fatalf("read-only List after the migration: %+v", l)
	}
	if got, slow := h.Renew(t, w, "a", time.Minute, k); !got[0] || slow {
		t.Fatalf("its next renewal: %v, slow %t; want renewed on the session alone", got, slow)
	}
}

// NoAutoMigrateWaitsForMigrate checks a table from before sessions that
// migrate brings up to date: openNoAutoMigrate, which opens a Store with
// NoAutoMigrate on it, fails saying to run tenure migrate until migrate
// has run, and succeeds after.
func NoAutoMigrateWaitsForMigrate(t *testing.T, openNoAutoMigrate func(context.Context) (io.Closer, error), migrate func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	w, err := openNoAutoMigrate(ctx)
	if err == nil {
		w.Close()
		t.Fatal("Open with NoAutoMigrate accepted a table from before sessions")
	}
	if !strings.Contains(err.Error(), "tenure migrate") {
		t.Fatalf("Open: %v; want it to say to run tenure migrate", err)
	}
	if err := migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w, err = openNoAutoMigrate(ctx)
	if err != nil {
		t.Fatalf("Open once migrated: %v", err)
	}
	w.Close()
}
