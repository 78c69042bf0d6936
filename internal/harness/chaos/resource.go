package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-dev/tenure/fence"
	"github.com/tenure-dev/tenure/store"
)

// resourceSpec names the database the runners' fenced writes land in: an
// SQLite file (for SQLite and Redis stores), or the server under test
// itself (PostgreSQL, MySQL, etcd), reached directly, not through the
// proxy: a replica cut off from its lease store can still reach the data,
// which is exactly when fencing matters.
type resourceSpec struct {
	Kind string `json:"kind"` // kindSQLite, kindPostgres, kindMySQL or kindEtcd
	Path string `json:"path,omitempty"`
	// Server is the store under test, for a resource kept in it (its Via
	// is empty: the resource is reached directly).
	Server backend `json:"server,omitzero"`
	Fence  string  `json:"fence"` // fence table (SQL)
	// Table is the resource table: key, seq, epoch, owner; on etcd, the
	// prefix /Table/ the resource's keys live under.
	Table string `json:"table"`
}

// newResourceSpec puts the run's resource next to its store where the
// store can fence writes itself and inStore allows it, and in an SQLite
// file in dir otherwise: Redis has no transaction that could hold a
// fence's order.
func newResourceSpec(b backend, runID, dir string, inStore bool) resourceSpec {
	b.Via = nil
	switch b.Kind {
	case kindPostgres, kindMySQL, kindEtcd:
		if !inStore {
			break
		}
		return resourceSpec{Kind: b.Kind, Server: b, Fence: "chaos_fence_" + runID, Table: "chaos_data_" + runID}
	}
	return resourceSpec{Kind: kindSQLite, Path: filepath.Join(dir, "resource.db"), Fence: "chaos_fence", Table: "chaos_data"}
}

// writeResult is what one fenced write came to.
type writeResult struct {
	accepted bool
	seq      int64 // accepted: the row's counter after this write
	prev     int64 // accepted: the row's epoch before this write
	cur      int64 // rejected: the fence's newer epoch
}

// resource is the fenced database seen from a replica.
type resource interface {
	read(ctx context.Context, key string) error
	write(ctx context.Context, key string, epoch int64, owner string) (writeResult, error)
	close()
}

// Every write runs the fence first, then reads the row's epoch and bumps
// its counter, all in one transaction: the counter numbers the accepted
// writes in commit order, which the checker compares with their epochs.
const (
	sqliteResource = `CREATE TABLE IF NOT EXISTS {t} (
	key TEXT PRIMARY KEY, seq INTEGER NOT NULL, epoch INTEGER NOT NULL, owner TEXT NOT NULL)`
	sqliteBump = `INSERT INTO {t} (key, seq, epoch, owner) VALUES (?, 1, ?, ?)
ON CONFLICT (key) DO UPDATE SET seq = {t}.seq + 1, epoch = excluded.epoch, owner = excluded.owner
RETURNING seq`
	pgResource = `CREATE TABLE IF NOT EXISTS {t} (
	key text COLLATE "C" PRIMARY KEY, seq bigint NOT NULL, epoch bigint NOT NULL, owner text NOT NULL)`
	pgBump = `INSERT INTO {t} AS r (key, seq, epoch, owner) VALUES ($1, 1, $2, $3)
ON CONFLICT (key) DO UPDATE SET seq = r.seq + 1, epoch = EXCLUDED.epoch, owner = EXCLUDED.owner
RETURNING seq`
)

func fill(q, table string) string { return strings.ReplaceAll(q, "{t}", table) }

func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(2000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}

// prepareResource creates the fence and resource tables once, before any
// replica starts.
func prepareResource(ctx context.Context, rs resourceSpec) error {
	for _, name := range []string{rs.Fence, rs.Table} {
		if err := store.ValidateName("chaos: table", name); err != nil {
			return err
		}
	}
	switch rs.Kind {
	case kindSQLite:
		db, err := sql.Open("sqlite", sqliteDSN(rs.Path))
		if err != nil {
			return err
		}
		defer db.Close()
		if err := (fence.SQL{Dialect: fence.SQLite, Table: rs.Fence}).Migrate(ctx, db); err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, fill(sqliteResource, rs.Table))
		return err
	case kindPostgres:
		pool, err := rs.Server.pgPool(ctx)
		if err != nil {
			return fmt.Errorf("chaos: resource database: %w", err)
		}
		defer pool.Close()
		if err := (fence.Pgx{Table: rs.Fence}).Migrate(ctx, pool); err != nil {
			return err
		}
		_, err = pool.Exec(ctx, fill(pgResource, pgx.Identifier{rs.Table}.Sanitize()))
		return err
	case kindMySQL:
		return prepareMySQLResource(ctx, rs)
	case kindEtcd:
		return nil // nothing to create
	}
	return fmt.Errorf("chaos: unknown resource kind %q", rs.Kind)
}

// dropResource removes the run's tables or keys from a resource in the
// server under test (an SQLite resource lives in the history directory).
func dropResource(ctx context.Context, rs resourceSpec) error {
	var err error
	switch rs.Kind {
	case kindPostgres:
		err = rs.Server.dropPostgres(ctx, rs.Fence, rs.Table)
	case kindMySQL:
		err = rs.Server.dropMySQL(ctx, rs.Fence, rs.Table)
	case kindEtcd:
		err = rs.Server.deleteEtcdPrefix(ctx, etcdResourcePrefix(rs))
	}
	return rs.Server.redact(err)
}

func openResource(ctx context.Context, rs resourceSpec) (resource, error) {
	switch rs.Kind {
	case kindSQLite:
		db, err := sql.Open("sqlite", sqliteDSN(rs.Path))
		if err != nil {
			return nil, err
		}
		return &sqliteResourceDB{db: db, spec: rs}, nil
	case kindPostgres:
		pool, err := rs.Server.pgPool(ctx)
		if err != nil {
			return nil, fmt.Errorf("chaos: resource database: %w", err)
		}
		return &pgResourceDB{pool: pool, spec: rs, ident: pgx.Identifier{rs.Table}.Sanitize()}, nil
	case kindMySQL:
		return openMySQLResource(rs)
	case kindEtcd:
		return openEtcdResource(rs)
	}
	return nil, fmt.Errorf("chaos: unknown resource kind %q", rs.Kind)
}

type sqliteResourceDB struct {
	db   *sql.DB
	spec resourceSpec
}

func (r *sqliteResourceDB) read(ctx context.Context, key string) error {
	var epoch int64
	err := r.db.QueryRowContext(ctx, "SELECT epoch FROM "+r.spec.Table+" WHERE key = ?", key).Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

func (r *sqliteResourceDB) write(ctx context.Context, key string, epoch int64, owner string) (writeResult, error) {
	tx, err := r.db.BeginTx(ctx, nil) // IMMEDIATE (see sqliteDSN): the fence's upsert is the first statement
	if err != nil {
		return writeResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if res, err := fenceOutcome(fence.SQL{Dialect: fence.SQLite, Table: r.spec.Fence}.Check(ctx, tx, key, epoch)); err != nil || !res.accepted {
		return res, err
	}
	var out writeResult
	err = tx.QueryRowContext(ctx, "SELECT epoch FROM "+r.spec.Table+" WHERE key = ?", key).Scan(&out.prev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return writeResult{}, err
	}
	if err := tx.QueryRowContext(ctx, fill(sqliteBump, r.spec.Table), key, epoch, owner).Scan(&out.seq); err != nil {
		return writeResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return writeResult{}, err
	}
	out.accepted = true
	return out, nil
}

func (r *sqliteResourceDB) close() { _ = r.db.Close() }

type pgResourceDB struct {
	pool  *pgxpool.Pool
	spec  resourceSpec
	ident string
}

func (r *pgResourceDB) read(ctx context.Context, key string) error {
	var epoch int64
	err := r.pool.QueryRow(ctx, "SELECT epoch FROM "+r.ident+" WHERE key = $1", key).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}

func (r *pgResourceDB) write(ctx context.Context, key string, epoch int64, owner string) (writeResult, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return writeResult{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	if res, err := fenceOutcome(fence.Pgx{Table: r.spec.Fence}.Check(ctx, tx, key, epoch)); err != nil || !res.accepted {
		return res, err
	}
	var out writeResult
	err = tx.QueryRow(ctx, "SELECT epoch FROM "+r.ident+" WHERE key = $1", key).Scan(&out.prev)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return writeResult{}, err
	}
	if err := tx.QueryRow(ctx, fill(pgBump, r.ident), key, epoch, owner).Scan(&out.seq); err != nil {
		return writeResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return writeResult{}, err
	}
	out.accepted = true
	return out, nil
}

func (r *pgResourceDB) close() { r.pool.Close() }

// fenceOutcome turns the fence's answer into a result: passed (go on and
// write), refused (a rejected write, with the newer epoch), or an error.
func fenceOutcome(err error) (writeResult, error) {
	if err == nil {
		return writeResult{accepted: true}, nil
	}
	var stale *fence.StaleEpochError
	if errors.As(err, &stale) {
		return writeResult{cur: stale.Current}, nil
	}
	if errors.Is(err, fence.ErrStaleEpoch) {
		return writeResult{}, nil
	}
	return writeResult{}, err
}
