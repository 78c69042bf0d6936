package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-dev/tenure/fence"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/mysql"
)

func TestNewerEpochPasses(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		for _, epoch := range []int64{1, 2, 7} {
			if err := checkAndWrite(t, e, "telegram", epoch); err != nil {
				t.Fatalf("epoch %d: %v", epoch, err)
			}
			if got := e.stored(t, "telegram"); got != epoch {
				t.Fatalf("fence holds epoch %d after epoch %d wrote", got, epoch)
			}
		}
	})
}

func TestTheSameEpochPassesAgainAndAgain(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		for range 3 {
			if err := checkAndWrite(t, e, "telegram", 4); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.writes(t, "telegram", 4); n != 3 {
			t.Fatalf("%d writes committed, want 3", n)
		}
	})
}

func TestOlderEpochIsRefusedAndTheCallersWriteIsNotCommitted(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		if err := checkAndWrite(t, e, "telegram", 5); err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		tx := e.begin(t)
		// A careless caller writes before checking; the fence still decides
		// the transaction's fate because the caller rolls back on refusal.
		if err := tx.write(ctx, "telegram", 4); err != nil {
			t.Fatal(err)
		}
		mustStale(t, tx.check(ctx, "telegram", 4), "telegram", 4, 5)
		tx.rollback()
		if n := e.writes(t, "telegram", 4); n != 0 {
			t.Fatalf("%d stale writes committed", n)
		}
		if got := e.stored(t, "telegram"); got != 5 {
			t.Fatalf("a refused check moved the fence to %d", got)
		}
	})
}

func TestAPausedHolderIsRefusedAfterAPeerTookOver(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		if err := checkAndWrite(t, e, "report", 1); err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		old := e.begin(t) // the old holder opens its transaction, then freezes

		if err := checkAndWrite(t, e, "report", 2); err != nil {
			t.Fatalf("new holder: %v", err)
		}

		mustStale(t, old.check(ctx, "report", 1), "report", 1, 2)
		old.rollback()
		if n := e.writes(t, "report", 2); n != 1 {
			t.Fatalf("new holder's write: %d rows, want 1", n)
		}
	})
}

func TestAPausedHolderThatReadFirstCannotCommitItsWrite(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		if err := checkAndWrite(t, e, "report", 1); err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		old := e.begin(t)
		if err := old.read(ctx); err != nil { // snapshot taken before the pause
			t.Fatal(err)
		}
		if err := checkAndWrite(t, e, "report", 2); err != nil {
			t.Fatalf("new holder: %v", err)
		}
		err := old.check(ctx, "report", 1)
		if e.latest {
			// PostgreSQL's READ COMMITTED: each statement sees the latest
			// commit; MySQL's check is a locking read, which does too.
			mustStale(t, err, "report", 1, 2)
		} else if err == nil {
			// SQLite cannot upgrade a stale read snapshot to a writer; any
			// error is a refusal, success would be the bug.
			t.Fatal("stale check after a read passed")
		}
		old.rollback()
		if n := e.writes(t, "report", 1); n != 1 {
			t.Fatalf("%d writes of epoch 1 committed, want only the one before the takeover", n)
		}
	})
}

func TestAStaleCheckWaitsForTheNewerHoldersCommitAndIsThenRefused(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		name := "first write of the key"
		if recorded {
			name = "key already fenced"
		}
		t.Run(name, func(t *testing.T) {
			eachFlavor(t, func(t *testing.T, e *env) {
				if recorded {
					if err := checkAndWrite(t, e, "sync", 1); err != nil {
						t.Fatal(err)
					}
				}
				ctx := testCtx(t)
				newer := e.begin(t)
				if err := newer.check(ctx, "sync", 2); err != nil {
					t.Fatal(err)
				}
				if err := newer.write(ctx, "sync", 2); err != nil {
					t.Fatal(err)
				}

				old := e.begin(t)
				done := make(chan error, 1)
				go func() { done <- old.check(ctx, "sync", 1) }()
				select {
				case err := <-done:
					t.Fatalf("stale check answered (%v) while the newer transaction was open", err)
				case <-time.After(300 * time.Millisecond):
				}

				if err := newer.commit(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					mustStale(t, err, "sync", 1, 2)
				case <-time.After(15 * time.Second):
					t.Fatal("stale check still blocked after the newer holder committed")
				}
				old.rollback()
			})
		})
	}
}

func TestTheNewerHolderWaitsForAnOlderOpenTransactionSoWritesStayInEpochOrder(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		ctx := testCtx(t)
		old := e.begin(t)
		if err := old.check(ctx, "sync", 1); err != nil {
			t.Fatal(err)
		}

		newer := e.begin(t)
		done := make(chan error, 1)
		go func() { done <- newer.check(ctx, "sync", 2) }()
		select {
		case err := <-done:
			t.Fatalf("newer check answered (%v) while the older transaction was open", err)
		case <-time.After(300 * time.Millisecond):
		}

		// The old holder passed the fence before it was replaced, so its
		// transaction is ordered before the new term's and may commit.
		if err := old.write(ctx, "sync", 1); err != nil {
			t.Fatal(err)
		}
		if err := old.commit(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("newer check: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("newer check still blocked after the older transaction committed")
		}
		if err := newer.commit(); err != nil {
			t.Fatal(err)
		}
		if err := checkAndWrite(t, e, "sync", 1); !errors.Is(err, fence.ErrStaleEpoch) {
			t.Fatalf("old epoch after the new term wrote: %v, want ErrStaleEpoch", err)
		}
	})
}

func TestARolledBackCheckDoesNotMoveTheFence(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		ctx := testCtx(t)
		tx := e.begin(t)
		if err := tx.check(ctx, "k", 9); err != nil {
			t.Fatal(err)
		}
		tx.rollback()
		if err := checkAndWrite(t, e, "k", 3); err != nil {
			t.Fatalf("epoch 3 after a rolled-back epoch 9: %v", err)
		}
	})
}

func TestKeysAreFencedByteForByte(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		if err := checkAndWrite(t, e, "job", 10); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"Job", "job ", "jöb", "JOB"} {
			if err := checkAndWrite(t, e, key, 1); err != nil {
				t.Errorf("key %q was fenced by key \"job\": %v", key, err)
			}
		}
	})
}

func TestMigrateCanRunAgainAndConcurrently(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		ctx := testCtx(t)
		if err := checkAndWrite(t, e, "k", 2); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { errs <- e.migrate(ctx) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("migrate again: %v", err)
			}
		}
		if got := e.stored(t, "k"); got != 2 {
			t.Fatalf("migrate lost the fence: epoch %d, want 2", got)
		}
	})
}

func TestReplicasCanCreateANewTableAtTheSameMoment(t *testing.T) {
	url := testenv.Postgres.URL(t)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	f := fence.Pgx{Table: uniqueTable(t)}
	defer pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+f.Table)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- f.Migrate(ctx, pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
}

func TestAMissingTableSaysToMigrate(t *testing.T) {
	eachFlavor(t, func(t *testing.T, e *env) {
		ctx := testCtx(t)
		tx := e.begin(t)
		var err error
		switch tt := tx.(type) {
		case *pgxTxn:
			err = fence.Pgx{Table: e.table + "_missing"}.Check(ctx, tt.tx, "k", 1)
		case *sqlTxn:
			err = fence.SQL{Dialect: tt.f.Dialect, Table: e.table + "_missing"}.Check(ctx, tt.tx, "k", 1)
		}
		if err == nil || !strings.Contains(err.Error(), "run Migrate") {
			t.Fatalf("got %v, want a hint to run Migrate", err)
		}
		if errors.Is(err, fence.ErrStaleEpoch) {
			t.Fatalf("a missing table reported as a stale epoch: %v", err)
		}
	})
}

func TestRepeatableReadRaceFailsWithASerializationErrorNotAPass(t *testing.T) {
	url := testenv.Postgres.URL(t)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	f := fence.Pgx{Table: uniqueTable(t)}
	if err := f.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+f.Table)
	if err := f.Check(ctx, pool, "k", 1); err != nil { // autocommit: fence at 1
		t.Fatal(err)
	}

	old, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(context.Background())
	if _, err := old.Exec(ctx, "SELECT 1"); err != nil { // the snapshot
		t.Fatal(err)
	}
	if err := f.Check(ctx, pool, "k", 2); err != nil {
		t.Fatal(err)
	}
	err = f.Check(ctx, old, "k", 1)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("got %v, want SQLSTATE 40001", err)
	}
}

// MySQL reports an upsert that changed nothing as one affected row when
// the client sets CLIENT_FOUND_ROWS; the fence must not read that as a pass.
func TestTheMySQLFenceDoesNotDependOnHowTheDriverCountsRows(t *testing.T) {
	cfg, _, err := mysql.ParseURL(testenv.MySQL.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = true
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := openSQL(t, sql.OpenDB(conn), fence.MySQL, "?", "?")
	for _, epoch := range []int64{3, 3} {
		if err := checkAndWrite(t, e, "k", epoch); err != nil {
			t.Fatalf("epoch %d: %v", epoch, err)
		}
	}
	mustStale(t, checkAndWrite(t, e, "k", 2), "k", 2, 3)
	if n := e.writes(t, "k", 2); n != 0 {
		t.Fatalf("%d stale writes committed", n)
	}
}

func TestInvalidTableNamesAreRefusedBeforeAnySQL(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"bad-name", "x; DROP TABLE users", "1abc", `"quoted"`, strings.Repeat("a", 64)} {
		checks := map[string]error{
			"Pgx.Check":          fence.Pgx{Table: name}.Check(ctx, noPgx{t}, "k", 1),
			"Pgx.Migrate":        fence.Pgx{Table: name}.Migrate(ctx, noPgx{t}),
			"SQL.Check":          fence.SQL{Dialect: fence.SQLite, Table: name}.Check(ctx, noSQL{t}, "k", 1),
			"SQL.Migrate":        fence.SQL{Dialect: fence.Postgres, Table: name}.Migrate(ctx, noSQL{t}),
			"Pgx.CreateTableSQL": second(fence.Pgx{Table: name}.CreateTableSQL()),
		}
		for what, err := range checks {
			if !errors.Is(err, store.ErrInvalidName) {
				t.Errorf("%s with table %q: got %v, want store.ErrInvalidName", what, name, err)
			}
		}
	}
}

func TestInvalidKeysAndEpochsAreRefusedBeforeAnySQL(t *testing.T) {
	ctx := context.Background()
	for _, key := range []string{"", "a\x00b", "tab\there", "\xff", strings.Repeat("k", store.MaxKeyBytes+1)} {
		if err := (fence.Pgx{}).Check(ctx, noPgx{t}, key, 1); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Pgx key %q: got %v, want store.ErrInvalidKey", key, err)
		}
		if err := (fence.SQL{Dialect: fence.SQLite}).Check(ctx, noSQL{t}, key, 1); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("SQL key %q: got %v, want store.ErrInvalidKey", key, err)
		}
	}
	for _, epoch := range []int64{0, -1} {
		if err := (fence.Pgx{}).Check(ctx, noPgx{t}, "k", epoch); !errors.Is(err, fence.ErrInvalidEpoch) {
			t.Errorf("epoch %d: got %v, want fence.ErrInvalidEpoch", epoch, err)
		}
	}
}

func TestSQLNeedsADialect(t *testing.T) {
	err := fence.SQL{}.Check(context.Background(), noSQL{t}, "k", 1)
	if err == nil || !strings.Contains(err.Error(), "Dialect") {
		t.Fatalf("got %v, want an error naming Dialect", err)
	}
}

func TestCreateTableSQLIsByteExactAndNamesTheTable(t *testing.T) {
	pg, err := fence.Pgx{}.CreateTableSQL()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pg, "CREATE TABLE IF NOT EXISTS "+fence.DefaultTable) || !strings.Contains(pg, `COLLATE "C"`) {
		t.Fatalf("postgres DDL:\n%s", pg)
	}
	lite, err := fence.SQL{Dialect: fence.SQLite, Table: "my_fence"}.CreateTableSQL()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lite, "CREATE TABLE IF NOT EXISTS my_fence") || strings.Contains(lite, "COLLATE") {
		t.Fatalf("sqlite DDL (default BINARY collation is byte-exact):\n%s", lite)
	}
	my, err := fence.SQL{Dialect: fence.MySQL, Table: "my_fence"}.CreateTableSQL()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(my, "CREATE TABLE IF NOT EXISTS my_fence") || !strings.Contains(my, "lease_key  VARBINARY(512)") {
		t.Fatalf("mysql DDL (VARBINARY compares bytes, without PAD SPACE):\n%s", my)
	}
}

func second(_ string, err error) error { return err }

// noPgx and noSQL fail the test if the fence reaches the database.
type noPgx struct{ t *testing.T }

func (n noPgx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	n.t.Error("SQL was sent")
	return pgconn.CommandTag{}, errors.New("no database")
}

func (n noPgx) QueryRow(context.Context, string, ...any) pgx.Row {
	n.t.Error("SQL was sent")
	return nil
}
