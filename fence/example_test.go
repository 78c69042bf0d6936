package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-dev/tenure/fence"
)

// A runner writes on behalf of its lease. Every transaction starts with the
// fence, and a refusal ends the runner just like a lost lease.
func ExamplePgx_Check() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	f := fence.Pgx{} // table "tenure_fence"
	if err := f.Migrate(ctx, pool); err != nil {
		panic(err)
	}

	// The runner's body: key and epoch come from the lease it was given.
	run := func(ctx context.Context, key string, epoch int64) error {
		for ctx.Err() == nil {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := f.Check(ctx, tx, key, epoch); err != nil {
					return err // BeginFunc rolls back
				}
				_, err := tx.Exec(ctx, "UPDATE reports SET sent_at = now() WHERE name = $1", key)
				return err
			})
			if errors.Is(err, fence.ErrStaleEpoch) {
				// A newer holder has written: this process was paused past
				// its lease. Stop without retrying.
				return err
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	_ = run(ctx, "nightly-report", 7)
}

// The same pattern on SQLite through database/sql: a holder that slept
// through its lease is refused once the next term has written.
func ExampleSQL_Check() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	f := fence.SQL{Dialect: fence.SQLite}
	if err := f.Migrate(ctx, db); err != nil {
		panic(err)
	}

	write := func(epoch int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f.Check(ctx, tx, "nightly-report", epoch); err != nil {
			return err
		}
		// … the runner's own writes go here, in tx …
		return tx.Commit()
	}

	fmt.Println("epoch 1:", write(1))
	fmt.Println("epoch 1 again:", write(1))
	fmt.Println("epoch 2 (new holder):", write(2))
	err = write(1) // the old holder wakes up
	fmt.Println("epoch 1 after that:", err)
	fmt.Println("stale:", errors.Is(err, fence.ErrStaleEpoch))
	// Output:
	// epoch 1: <nil>
	// epoch 1 again: <nil>
	// epoch 2 (new holder): <nil>
	// epoch 1 after that: fence: key "nightly-report": epoch 1 is stale, a newer holder recorded epoch 2
	// stale: true
}
