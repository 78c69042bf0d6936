package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

func TestWatchesOfAnotherTableInTheFileHearNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	a := openAt(t, path, Options{})
	otherTable := openAt(t, path, Options{Table: "other_leases"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := otherTable.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	e := mustAcquire(t, a, "job/1", "a")
	testenv.Release(t, a, "a", store.Term{Key: "job/1", Epoch: e})
	quiet(t, evs, 100*time.Millisecond)
}
