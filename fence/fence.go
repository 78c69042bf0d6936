package fence

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/tenure-dev/tenure/store"
)

// DefaultTable is the fence table's name when Table is left empty.
const DefaultTable = "tenure_fence"

// Sentinel errors; check them with errors.Is.
var (
	// ErrStaleEpoch: a newer holder of the key has already passed the fence.
	// The caller's transaction must be rolled back and the work stopped: the
	// lease is lost. The error is a *StaleEpochError when the recorded epoch
	// could be read.
	ErrStaleEpoch = errors.New("fence: stale epoch")
	// ErrInvalidEpoch: the epoch is zero or negative, which no lease store
	// grants; usually a zero-valued lease reached the fence by mistake.
	ErrInvalidEpoch = errors.New("fence: invalid epoch")
)

// StaleEpochError says which epoch was refused and which one the fence
// table holds. errors.Is(err, ErrStaleEpoch) is true for it.
type StaleEpochError struct {
	Key string
	// Epoch is the epoch the caller presented.
	Epoch int64
	// Current is the newer epoch recorded in the fence table.
	Current int64
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("fence: key %q: epoch %d is stale, a newer holder recorded epoch %d", e.Key, e.Epoch, e.Current)
}

// Unwrap makes errors.Is(err, ErrStaleEpoch) true.
func (e *StaleEpochError) Unwrap() error { return ErrStaleEpoch }

// Dialect is the SQL flavour a database/sql fence speaks.
type Dialect int

const (
	// Postgres is PostgreSQL, through any database/sql driver (pgx's stdlib,
	// lib/pq).
	Postgres Dialect = iota + 1
	// SQLite is SQLite 3.24 or newer (for upserts), e.g. modernc.org/sqlite.
	SQLite
	// MySQL is MySQL 8 or MariaDB 10.6 or newer (as for the MySQL lease
	// store), on InnoDB, e.g. through github.com/go-sql-driver/mysql.
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	case MySQL:
		return "mysql"
	default:
		return fmt.Sprintf("Dialect(%d)", int(d))
	}
}

// statements holds one dialect's SQL for one validated table.
type statements struct {
	table string
	// advance records the epoch when it is at least the stored one and
	// affects no row otherwise. Parameters: args(key, epoch).
	advance string
	// current reads the stored epoch. Parameter: args(key, 0)[0].
	current string
	// args are advance's parameters; nil means key, epoch.
	args func(key string, epoch int64) []any
	// readBack: advance's count of affected rows says nothing (MySQL's
	// depends on the client's CLIENT_FOUND_ROWS flag), so the stored epoch
	// is read back, under the lock advance took, and compared.
	readBack bool
	// create is the plain DDL, for users who run their own migrations.
	create string
	// migrate is what Migrate runs: create, made safe to race with itself.
	migrate string
}

// The key column is byte-exact in both dialects ("Job", "job" and "job "
// are three fences) because lease keys are: SQLite's default BINARY
// collation already compares bytes, Postgres needs COLLATE "C".
const (
	pgCreate = `CREATE TABLE IF NOT EXISTS {table} (
	lease_key  text COLLATE "C" PRIMARY KEY,
	epoch      bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`
	// ON CONFLICT DO UPDATE locks the conflicting row even when its WHERE
	// is false, so a stale caller also waits for the newer holder's
	// transaction and then reads the committed epoch, never a guess.
	pgAdvance = `INSERT INTO {table} AS f (lease_key, epoch, updated_at)
VALUES ($1, $2, clock_timestamp())
ON CONFLICT (lease_key) DO UPDATE
SET epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at
WHERE f.epoch <= EXCLUDED.epoch`
	pgCurrent = `SELECT epoch FROM {table} WHERE lease_key = $1`

	sqliteCreate = `CREATE TABLE IF NOT EXISTS {table} (
	lease_key  TEXT NOT NULL PRIMARY KEY,
	epoch      INTEGER NOT NULL,
	updated_at TEXT NOT NULL
) WITHOUT ROWID`
	sqliteAdvance = `INSERT INTO {table} (lease_key, epoch, updated_at)
VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (lease_key) DO UPDATE
SET epoch = excluded.epoch, updated_at = excluded.updated_at
WHERE excluded.epoch >= {table}.epoch`
	sqliteCurrent = `SELECT epoch FROM {table} WHERE lease_key = ?`

	// Keys are VARBINARY and travel as hex, as in the MySQL lease store:
	// byte for byte, with no collation (a PAD SPACE collation would make
	// "job" equal "job ") and no connection character set in the way.
	mysqlCreate = `CREATE TABLE IF NOT EXISTS {table} (
	lease_key  VARBINARY(512) NOT NULL PRIMARY KEY,
	epoch      BIGINT NOT NULL,
	updated_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`
	// The upsert takes the row's exclusive lock whether or not it changes
	// it, after waiting for any transaction that holds it, so a stale
	// caller also waits for the newer holder's commit. Assignments run
	// left to right: updated_at is decided on the epoch before the update.
	mysqlAdvance = `INSERT INTO {table} (lease_key, epoch, updated_at)
VALUES (UNHEX(?), ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
updated_at = IF(epoch <= ?, UTC_TIMESTAMP(6), updated_at),
epoch = GREATEST(epoch, ?)`
	// A locking read sees the latest committed row, whatever the
	// isolation level and whenever the transaction's snapshot was taken.
	mysqlCurrent = `SELECT epoch FROM {table} WHERE lease_key = UNHEX(?) FOR UPDATE`
)

func newStatements(d Dialect, table string) (statements, error) {
	if table == "" {
		table = DefaultTable
	}
	// The name is spliced into SQL, so nothing but a plain identifier passes.
	if err := store.ValidateName("fence table", table); err != nil {
		return statements{}, err
	}
	fill := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	switch d {
	case Postgres:
		create := fill(pgCreate)
		return statements{
			table:   table,
			advance: fill(pgAdvance),
			current: fill(pgCurrent),
			create:  create,
			migrate: pgMigrate(table, create),
		}, nil
	case SQLite:
		create := fill(sqliteCreate)
		// SQLite takes a database-wide write lock for DDL, so concurrent
		// CREATE TABLE IF NOT EXISTS cannot collide.
		return statements{table: table, advance: fill(sqliteAdvance), current: fill(sqliteCurrent), create: create, migrate: create}, nil
	case MySQL:
		create := fill(mysqlCreate)
		// MySQL's and MariaDB's CREATE TABLE IF NOT EXISTS holds an
		// exclusive metadata lock on the name: concurrent ones cannot collide.
		return statements{
			table:   table,
			advance: fill(mysqlAdvance),
			current: fill(mysqlCurrent),
			create:  create,
			migrate: create,
			args: func(key string, epoch int64) []any {
				return []any{hex.EncodeToString([]byte(key)), epoch, epoch, epoch}
			},
			readBack: true,
		}, nil
	default:
		return statements{}, fmt.Errorf("fence: dialect %v is not supported; set Dialect to fence.Postgres, fence.SQLite or fence.MySQL", d)
	}
}

// pgMigrate wraps the DDL in a transaction-scoped advisory lock: two
// replicas running CREATE TABLE IF NOT EXISTS at the same moment can
// otherwise both miss the table and one fails on pg_type's unique index.
// A DO block is one statement, so this works on a pool as well as in a
// caller's transaction.
func pgMigrate(table, create string) string {
	h := fnv.New64a()
	h.Write([]byte("tenure/fence/" + table))
	lock := int64(h.Sum64())
	return fmt.Sprintf("DO $fence$ BEGIN PERFORM pg_advisory_xact_lock(%d); %s; END $fence$", lock, create)
}

func validateCheck(key string, epoch int64) error {
	if err := store.ValidateKey(key); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if epoch < 1 {
		return fmt.Errorf("fence: key %q: epoch %d is not positive: %w", key, epoch, ErrInvalidEpoch)
	}
	return nil
}

// check runs the fence: advance the stored epoch, and when that touched no
// row, read the newer epoch that refused us. exec returns rows affected.
func check(ctx context.Context, st statements, key string, epoch int64,
	exec func(ctx context.Context, query string, args ...any) (int64, error),
	current func(ctx context.Context, query string, args ...any) (int64, error),
) error {
	if err := validateCheck(key, epoch); err != nil {
		return err
	}
	args := []any{key, epoch}
	if st.args != nil {
		args = st.args(key, epoch)
	}
	n, err := exec(ctx, st.advance, args...)
	if err != nil {
		return fmt.Errorf("fence: check key %q at epoch %d: %w", key, epoch, explain(st.table, err))
	}
	if n > 0 && !st.readBack {
		return nil
	}
	// The row exists and is locked by this transaction (Postgres, MySQL)
	// or the database is write-locked by it (SQLite), so this read is the
	// value that let us pass or refused us.
	cur, err := current(ctx, st.current, args[0])
	switch {
	case err != nil && st.readBack:
		// Whether the epoch passed is unknown: the caller must not write.
		return fmt.Errorf("fence: check key %q at epoch %d: read back the fence: %w", key, epoch, err)
	case err != nil:
		// The refusal stands; only its detail is missing.
		return fmt.Errorf("fence: key %q: epoch %d refused (reading the newer epoch failed: %v): %w", key, epoch, err, ErrStaleEpoch)
	case st.readBack && cur <= epoch:
		return nil
	}
	return &StaleEpochError{Key: key, Epoch: epoch, Current: cur}
}

// explain adds a hint to the one mistake everyone makes once: forgetting to
// create the table.
func explain(table string, err error) error {
	var coded interface{ SQLState() string }
	msg := err.Error()
	missing := errors.As(err, &coded) && coded.SQLState() == "42P01" ||
		strings.Contains(msg, "no such table") ||
		// go-sql-driver/mysql: "Error 1146 (42S02): Table 'db.t' doesn't exist"
		strings.Contains(msg, "Error 1146") && strings.Contains(msg, "doesn't exist")
	if missing {
		return fmt.Errorf("fence table %s does not exist; run Migrate (or the DDL from CreateTableSQL) first: %w", table, err)
	}
	return err
}
