package fence

import (
	"context"
	"database/sql"
	"fmt"
)

// SQLQuerier is what the database/sql fence needs: *sql.Tx, *sql.DB and
// *sql.Conn all satisfy it. Check only fences anything inside a
// transaction, so pass it a *sql.Tx; the others are for Migrate.
type SQLQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL is a fence in a database reached through database/sql. Dialect must
// be set; it names the SQL the database speaks, not the driver. An SQL holds
// no connection and is safe to copy and to use from many goroutines.
type SQL struct {
	Dialect Dialect
	// Table is the fence table's name, a plain identifier. Empty means
	// [DefaultTable].
	Table string
}

// Check lets the transaction tx write on behalf of the lease (key, epoch),
// or refuses with [ErrStaleEpoch] when a newer epoch of key has already
// passed the fence. Call it as the first statement of every transaction that
// writes for the lease, and roll back on any error.
//
// On PostgreSQL it locks the key's fence row until tx ends, as [Pgx.Check]
// does. On MySQL it does too: an upsert that takes the row's lock (waiting
// for a newer holder's open transaction) and a locking read of the epoch
// it left, two round trips that do not depend on how the driver counts
// affected rows. On SQLite the upsert takes the database's write lock, which
// serializes every writer until tx ends; it must be the transaction's first
// statement (or the transaction must begin IMMEDIATE, e.g. modernc's
// _txlock=immediate), because a transaction that has already read cannot
// take the write lock after a newer holder committed: SQLite then answers
// "database is locked" (SQLITE_BUSY_SNAPSHOT) instead of waiting.
func (s SQL) Check(ctx context.Context, tx SQLQuerier, key string, epoch int64) error {
	st, err := newStatements(s.Dialect, s.Table)
	if err != nil {
		return err
	}
	return check(ctx, st, key, epoch,
		func(ctx context.Context, query string, args ...any) (int64, error) {
			res, err := tx.ExecContext(ctx, query, args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		},
		func(ctx context.Context, query string, args ...any) (int64, error) {
			var cur int64
			err := tx.QueryRowContext(ctx, query, args...).Scan(&cur)
			return cur, err
		})
}

// Migrate creates the fence table if it does not exist. Replicas may run it
// concurrently at startup.
func (s SQL) Migrate(ctx context.Context, db SQLQuerier) error {
	st, err := newStatements(s.Dialect, s.Table)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, st.migrate); err != nil {
		return fmt.Errorf("fence: create table %s: %w", st.table, err)
	}
	return nil
}

// CreateTableSQL returns the DDL Migrate runs, for projects that keep their
// schema in their own migration files.
func (s SQL) CreateTableSQL() (string, error) {
	st, err := newStatements(s.Dialect, s.Table)
	if err != nil {
		return "", err
	}
	return st.create + ";", nil
}
