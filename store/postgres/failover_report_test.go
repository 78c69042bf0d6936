package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// failoverLoss is what one failover lost of the writes the old primary
// had acknowledged: WAL is one stream, so what is lost is its tail.
type failoverLoss struct {
	commits int           // acknowledged acquisitions and renewals missing on the new primary
	window  time.Duration // from the last acknowledgement kept to the last given
}

// TestFailoverLossReport kills the primary while one writer acquires a new
// key and renews one lease as fast as the primary answers, promotes the
// standby, and counts what the new primary lacks of what was acknowledged
// — per commit setting. TENURE_FAILOVERS sets the failovers per setting
// (1 here; SAFETY.md's figures come from 20):
//
//	TENURE_FAILOVERS=20 go test ./store/postgres -run TestFailoverLossReport -v
//
// Synchronous settings must lose nothing; asynchronous replication may.
func TestFailoverLossReport(t *testing.T) {
	runs := 1
	if v := os.Getenv("TENURE_FAILOVERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TENURE_FAILOVERS=%q: want a count", v)
		}
		runs = n
	}
	for _, setup := range []struct {
		commit testenv.Commit
		lag    time.Duration // added to the replication link, each way
	}{
		{testenv.Off, 0},
		{testenv.Async, 0},
		{testenv.Async, 5 * time.Millisecond},
		{testenv.SyncOn, 5 * time.Millisecond},
		{testenv.RemoteApply, 5 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%s/%v", setup.commit, setup.lag), func(t *testing.T) {
			pair := testenv.StartPostgresPair(t, setup.commit)
			pair.SetReplicationDelay(setup.lag)
			var losses []failoverLoss
			for i := range runs {
				if i > 0 {
					if err := pair.Rejoin(); err != nil {
						t.Fatal(err)
					}
				}
				losses = append(losses, measureFailover(t, pair))
			}
			lost, most, worst := 0, 0, time.Duration(0)
			for _, l := range losses {
				if l.commits > 0 {
					lost++
				}
				most = max(most, l.commits)
				worst = max(worst, l.window)
			}
			t.Logf("synchronous_commit %-12s link +%-5v %d failovers, %d lost acknowledged commits; at most %d commits, spanning %v",
				setup.commit, setup.lag, runs, lost, most, worst.Round(time.Microsecond))
			if (setup.commit == testenv.SyncOn || setup.commit == testenv.RemoteApply) && lost > 0 {
				t.Errorf("a synchronous standby lost acknowledged writes: %+v", losses)
			}
		})
	}
}

// measureFailover acquires a new key and renews one lease, one commit
// after another, until a failover it starts at a random moment cuts it
// off, then reads what the new primary kept.
func measureFailover(t *testing.T, pair *testenv.PostgresPair) failoverLoss {
	t.Helper()
	table := testenv.UniqueName("loss_")
	s, err := Open(testenv.Context(t), pair.PrimaryURL(), Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ttl, grace = time.Minute, time.Second
	renewed := testenv.MustAcquire(t, s, "r", "w", ttl, grace)

	writes := testenv.StartWrites(s, "w", renewed, ttl, grace)
	time.Sleep(time.Duration(200+rand.IntN(500)) * time.Millisecond)
	if err := pair.Failover(); err != nil {
		t.Fatal(err)
	}
	writes.Wait()

	ctx := testenv.Context(t)
	conn, err := pgx.Connect(ctx, pair.PrimaryURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var newest string
	err = conn.QueryRow(ctx, `SELECT COALESCE(max(key), 'k0') FROM `+pgx.Identifier{table}.Sanitize()+` WHERE key LIKE 'k%'`).Scan(&newest)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := strconv.Atoi(newest[1:])
	if err != nil {
		t.Fatal(err)
	}
	commits, window := writes.LostTail(kept)
	return failoverLoss{commits: commits, window: window}
}
