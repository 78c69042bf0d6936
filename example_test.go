package tenure_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// A runner that works while this replica holds the "telegram" lease. Every
// replica runs the same code; only the lease holder runs the poller.
func Example() {
	dir, _ := os.MkdirTemp("", "tenure-example")
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	st, err := sqlite.Open(ctx, filepath.Join(dir, "leases.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()

	sup, err := tenure.New(tenure.Config{
		Store:  st,
		Leases: tenure.LeasesOn,
		Owner:  "replica-1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	sup.Set("telegram", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		fmt.Printf("polling %s as %s, epoch %d\n", l.Key, tenure.OwnerName(l.Owner), l.Epoch)
		stop() // a real poller would work until ctx is cancelled
		<-ctx.Done()
		return nil
	})})
	if err := sup.Run(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("released:", sup.KeyStatus("telegram").Leader == "")
	// Output:
	// polling telegram as replica-1, epoch 1
	// released: true
}

// A nightly report that runs on one replica per night, at 03:00 Berlin
// time, even when replicas crash: every replica runs the same code, the
// holder of "nightly-report" is its scheduler, and each finished night is
// recorded in the store.
func ExampleParseSchedule() {
	nightly, err := tenure.ParseSchedule("CRON_TZ=Europe/Berlin 0 3 * * *")
	if err != nil {
		fmt.Println(err)
		return
	}
	job := tenure.Job{
		Schedule: nightly,
		Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			// Write the report; return nil once it is done. An error is
			// retried with backoff within the same night.
			return nil
		}),
	}
	fmt.Println(job.Schedule)
	// Output: CRON_TZ=Europe/Berlin 0 3 * * *
}

// Pausing a key stops it on every replica until it is resumed; any
// process that can reach the store may do it (tenure pause does).
func ExamplePause() {
	dir, _ := os.MkdirTemp("", "tenure-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "leases.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	if err := tenure.Pause(ctx, st, "nightly-report"); err != nil {
		fmt.Println(err)
		return
	}
	paused, _ := tenure.Paused(ctx, st, "nightly-report")
	fmt.Println("paused:", paused)
	resumed, _ := tenure.Resume(ctx, st, "nightly-report")
	paused, _ = tenure.Paused(ctx, st, "nightly-report")
	fmt.Println("resumed:", resumed, "paused:", paused)
	// Output:
	// paused: true
	// resumed: true paused: false
}
