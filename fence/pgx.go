package fence

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgxQuerier is what the pgx fence needs: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool all satisfy it. Check only fences anything inside a
// transaction, so pass it a pgx.Tx; pools and connections are for Migrate.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pgx is a fence in a PostgreSQL database reached through pgx v5. The zero
// value uses [DefaultTable]. A Pgx holds no connection and is safe to copy
// and to use from many goroutines.
type Pgx struct {
	// Table is the fence table's name, a plain identifier (resolved through
	// the connection's search_path). Empty means [DefaultTable].
	Table string
}

// Check lets the transaction tx write on behalf of the lease (key, epoch),
// or refuses with [ErrStaleEpoch] when a newer epoch of key has already
// passed the fence. Call it as the first statement of every transaction that
// writes for the lease, and roll back on any error.
//
// On success the fence row stays locked until tx ends, so a newer holder's
// Check waits for this transaction and every write made here is ordered
// before every write of the newer term. A stale Check likewise waits for a
// newer holder's open transaction before it answers.
func (p Pgx) Check(ctx context.Context, tx PgxQuerier, key string, epoch int64) error {
	st, err := newStatements(Postgres, p.Table)
	if err != nil {
		return err
	}
	return check(ctx, st, key, epoch,
		func(ctx context.Context, query string, args ...any) (int64, error) {
			tag, err := tx.Exec(ctx, query, args...)
			return tag.RowsAffected(), err
		},
		func(ctx context.Context, query string, args ...any) (int64, error) {
			var cur int64
			err := tx.QueryRow(ctx, query, args...).Scan(&cur)
			return cur, err
		})
}

// Migrate creates the fence table if it does not exist. Replicas may run it
// concurrently at startup.
func (p Pgx) Migrate(ctx context.Context, db PgxQuerier) error {
	st, err := newStatements(Postgres, p.Table)
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, st.migrate); err != nil {
		return fmt.Errorf("fence: create table %s: %w", st.table, err)
	}
	return nil
}

// CreateTableSQL returns the DDL Migrate runs, for projects that keep their
// schema in their own migration files.
func (p Pgx) CreateTableSQL() (string, error) {
	st, err := newStatements(Postgres, p.Table)
	if err != nil {
		return "", err
	}
	return st.create + ";", nil
}
