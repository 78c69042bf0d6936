package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tenure-dev/tenure/store/sqlite"
)

// Replicas of one host start together on a fresh file: every one must
// open it. Switching a new file to WAL can answer SQLITE_BUSY at once,
// without waiting for the busy timeout; one of two `tenure run` started
// together exited with "database is locked" in CI.
func TestReplicasStartingTogetherAllOpenAFreshFile(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("fresh-%d.db", round))
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Go(func() {
				st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
				if err != nil {
					errs <- err
					return
				}
				st.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
