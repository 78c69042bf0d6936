package fence

import (
	"context"
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
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	default:
		return fmt.Sprintf("Dialect(%d)", int(d))
	}
}

// statements holds one dialect's SQL for one validated table.
type statements struct {
	table string
	// advance records the epoch when it is at least the stored one and
	// affects no row otherwise. Parameters: key, epoch.
	advance string
	// current reads the stored epoch. Parameter: key.
	current string
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
	default:
		return statements{}, fmt.Errorf("fence: dialect %v is not supported; set Dialect to fence.Postgres or fence.SQLite", d)
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
	n, err := exec(ctx, st.advance, key, epoch)
	if err != nil {
		return fmt.Errorf("fence: check key %q at epoch %d: %w", key, epoch, explain(st.table, err))
	}
	if n > 0 {
		return nil
	}
	// The row exists and is locked by this transaction (Postgres) or the
	// database is write-locked by it (SQLite), so this read is the value
	// that refused us.
	cur, err := current(ctx, st.current, key)
	if err != nil {
		// The refusal stands; only its detail is missing.
		return fmt.Errorf("fence: key %q: epoch %d refused (reading the newer epoch failed: %v): %w", key, epoch, err, ErrStaleEpoch)
	}
	return &StaleEpochError{Key: key, Epoch: epoch, Current: cur}
}

// explain adds a hint to the one mistake everyone makes once: forgetting to
// create the table.
func explain(table string, err error) error {
	var coded interface{ SQLState() string }
	missing := errors.As(err, &coded) && coded.SQLState() == "42P01" ||
		strings.Contains(err.Error(), "no such table")
	if missing {
		return fmt.Errorf("fence table %s does not exist; run Migrate (or the DDL from CreateTableSQL) first: %w", table, err)
	}
	return err
}
