package fence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/tenure-dev/tenure/fence"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store/mysql"
)

// The interfaces are satisfied by what users already hold.
var (
	_ fence.PgxQuerier = pgx.Tx(nil)
	_ fence.PgxQuerier = (*pgx.Conn)(nil)
	_ fence.PgxQuerier = (*pgxpool.Pool)(nil)
	_ fence.SQLQuerier = (*sql.Tx)(nil)
	_ fence.SQLQuerier = (*sql.DB)(nil)
	_ fence.SQLQuerier = (*sql.Conn)(nil)
)

// env is one isolated database with a migrated fence table and a table the
// "caller" writes its own rows to, reached through one of the flavours.
type env struct {
	table string
	begin func(t *testing.T) txn
	// writes counts the caller's committed rows for key at epoch.
	writes func(t *testing.T, key string, epoch int64) int
	// migrate runs the flavour's Migrate for the env's fence table.
	migrate func(ctx context.Context) error
	// stored reads the epoch in the fence table, committed.
	stored func(t *testing.T, key string) int64
	// latest is true where a check reads the latest commit even after the
	// transaction took a snapshot (PostgreSQL's READ COMMITTED, MySQL's
	// locking reads); SQLite cannot upgrade a stale snapshot at all.
	latest bool
}

// txn is a caller's transaction: the fence check plus the caller's own write.
type txn interface {
	check(ctx context.Context, key string, epoch int64) error
	write(ctx context.Context, key string, epoch int64) error
	// read is a plain query, to take a snapshot before the check.
	read(ctx context.Context) error
	commit() error
	rollback()
}

type flavor struct {
	name string
	open func(t *testing.T) *env
}

var flavors = []flavor{
	{"pgx", openPgx},
	{"sql-postgres", openSQLPostgres},
	{"sql-sqlite", openSQLite},
	{"sql-mysql", openSQLMySQL},
}

// eachFlavor runs body against every flavour, each with fresh tables.
func eachFlavor(t *testing.T, body func(t *testing.T, e *env)) {
	t.Helper()
	for _, f := range flavors {
		t.Run(f.name, func(t *testing.T) { body(t, f.open(t)) })
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func uniqueTable(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "fence_test_" + hex.EncodeToString(b)
}

func openPgx(t *testing.T) *env {
	url := testenv.Postgres.URL(t)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	table := uniqueTable(t)
	f := fence.Pgx{Table: table}
	if err := f.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s_w (lease_key text, epoch bigint)", table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := pool.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %s, %s_w", table, table)); err != nil {
			t.Errorf("drop: %v", err)
		}
	})
	return &env{
		table:  table,
		latest: true,
		begin: func(t *testing.T) txn {
			tx, err := pool.Begin(testCtx(t))
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			p := &pgxTxn{f: f, tx: tx, table: table}
			t.Cleanup(p.rollback)
			return p
		},
		writes: func(t *testing.T, key string, epoch int64) int {
			var n int
			q := fmt.Sprintf("SELECT count(*) FROM %s_w WHERE lease_key = $1 AND epoch = $2", table)
			if err := pool.QueryRow(testCtx(t), q, key, epoch).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		stored: func(t *testing.T, key string) int64 {
			var n int64
			q := fmt.Sprintf("SELECT epoch FROM %s WHERE lease_key = $1", table)
			if err := pool.QueryRow(testCtx(t), q, key).Scan(&n); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			return n
		},
		migrate: func(ctx context.Context) error { return f.Migrate(ctx, pool) },
	}
}

type pgxTxn struct {
	f     fence.Pgx
	tx    pgx.Tx
	table string
}

func (p *pgxTxn) check(ctx context.Context, key string, epoch int64) error {
	return p.f.Check(ctx, p.tx, key, epoch)
}

func (p *pgxTxn) write(ctx context.Context, key string, epoch int64) error {
	_, err := p.tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s_w VALUES ($1, $2)", p.table), key, epoch)
	return err
}

func (p *pgxTxn) read(ctx context.Context) error {
	_, err := p.tx.Exec(ctx, fmt.Sprintf("SELECT count(*) FROM %s_w", p.table))
	return err
}

func (p *pgxTxn) commit() error { return p.tx.Commit(context.Background()) }
func (p *pgxTxn) rollback()     { _ = p.tx.Rollback(context.Background()) }

func openSQLPostgres(t *testing.T) *env {
	url := testenv.Postgres.URL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return openSQL(t, db, fence.Postgres, "$1", "$2")
}

func openSQLite(t *testing.T) *env {
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return openSQL(t, db, fence.SQLite, "?", "?")
}

// openSQLMySQL reaches the test MySQL or MariaDB through go-sql-driver/mysql,
// configured from its URL as the MySQL lease store reads it.
func openSQLMySQL(t *testing.T) *env {
	cfg, _, err := mysql.ParseURL(testenv.MySQL.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return openSQL(t, sql.OpenDB(conn), fence.MySQL, "?", "?")
}

func openSQL(t *testing.T, db *sql.DB, d fence.Dialect, p1, p2 string) *env {
	t.Cleanup(func() { db.Close() })
	ctx := testCtx(t)
	table := uniqueTable(t)
	f := fence.SQL{Dialect: d, Table: table}
	if err := f.Migrate(ctx, db); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s_w (lease_key text, epoch bigint)", table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, name := range []string{table, table + "_w"} {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
				t.Errorf("drop: %v", err)
			}
		}
	})
	return &env{
		table:  table,
		latest: d != fence.SQLite,
		begin: func(t *testing.T) txn {
			tx, err := db.BeginTx(testCtx(t), nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			s := &sqlTxn{f: f, tx: tx, insert: fmt.Sprintf("INSERT INTO %s_w VALUES (%s, %s)", table, p1, p2), table: table}
			t.Cleanup(s.rollback)
			return s
		},
		writes: func(t *testing.T, key string, epoch int64) int {
			var n int
			q := fmt.Sprintf("SELECT count(*) FROM %s_w WHERE lease_key = %s AND epoch = %s", table, p1, p2)
			if err := db.QueryRowContext(testCtx(t), q, key, epoch).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
		stored: func(t *testing.T, key string) int64 {
			var n int64
			q := fmt.Sprintf("SELECT epoch FROM %s WHERE lease_key = %s", table, p1)
			if err := db.QueryRowContext(testCtx(t), q, key).Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
				t.Fatal(err)
			}
			return n
		},
		migrate: func(ctx context.Context) error { return f.Migrate(ctx, db) },
	}
}

type sqlTxn struct {
	f      fence.SQL
	tx     *sql.Tx
	insert string
	table  string
}

func (s *sqlTxn) check(ctx context.Context, key string, epoch int64) error {
	return s.f.Check(ctx, s.tx, key, epoch)
}

func (s *sqlTxn) write(ctx context.Context, key string, epoch int64) error {
	_, err := s.tx.ExecContext(ctx, s.insert, key, epoch)
	return err
}

func (s *sqlTxn) read(ctx context.Context) error {
	var n int
	return s.tx.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM %s_w", s.table)).Scan(&n)
}

func (s *sqlTxn) commit() error { return s.tx.Commit() }
func (s *sqlTxn) rollback()     { _ = s.tx.Rollback() }

// checkAndWrite is one complete, committed write on behalf of (key, epoch).
func checkAndWrite(t *testing.T, e *env, key string, epoch int64) error {
	t.Helper()
	ctx := testCtx(t)
	tx := e.begin(t)
	defer tx.rollback()
	if err := tx.check(ctx, key, epoch); err != nil {
		return err
	}
	if err := tx.write(ctx, key, epoch); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := tx.commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return nil
}

// mustStale asserts err is the stale-epoch refusal and carries current.
func mustStale(t *testing.T, err error, key string, epoch, current int64) {
	t.Helper()
	if !errors.Is(err, fence.ErrStaleEpoch) {
		t.Fatalf("got %v, want fence.ErrStaleEpoch", err)
	}
	var se *fence.StaleEpochError
	if !errors.As(err, &se) {
		t.Fatalf("got %T %v, want a *fence.StaleEpochError", err, err)
	}
	if *se != (fence.StaleEpochError{Key: key, Epoch: epoch, Current: current}) {
		t.Fatalf("got %+v, want key %q epoch %d current %d", *se, key, epoch, current)
	}
}

type noSQL struct{ t *testing.T }

func (n noSQL) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	n.t.Error("SQL was sent")
	return nil, errors.New("no database")
}

func (n noSQL) QueryRowContext(context.Context, string, ...any) *sql.Row {
	n.t.Error("SQL was sent")
	return nil
}
