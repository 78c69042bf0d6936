package chaos

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/tenure-dev/tenure/fence"
)

// A MySQL resource is fenced by fence.SQL's MySQL dialect, the fence a
// MySQL user would deploy. Keys travel as hex into VARBINARY, byte for
// byte, as in the fence and the lease store. The row keeps the epoch it
// held before the last write (prev): MySQL has no RETURNING, and a read
// before the upsert would lock a gap for a key not yet written, which
// deadlocks two first writes of different keys under REPEATABLE READ.
const (
	mysqlResource = "CREATE TABLE IF NOT EXISTS `{t}` (" + `
	lease_key VARBINARY(512) NOT NULL PRIMARY KEY,
	seq BIGINT NOT NULL, epoch BIGINT NOT NULL, prev BIGINT NOT NULL,
	owner VARBINARY(512) NOT NULL) ENGINE=InnoDB`
	// Assignments run left to right: prev takes the epoch being replaced.
	mysqlBump = "INSERT INTO `{t}` (lease_key, seq, epoch, prev, owner) VALUES (UNHEX(?), 1, ?, 0, ?)" + `
ON DUPLICATE KEY UPDATE prev = epoch, seq = seq + 1, epoch = ?, owner = ?`
	// The row is locked by this transaction's upsert: this reads its write.
	mysqlBumped = "SELECT seq, prev FROM `{t}` WHERE lease_key = UNHEX(?)"
	mysqlRead   = "SELECT epoch FROM `{t}` WHERE lease_key = UNHEX(?)"
)

func prepareMySQLResource(ctx context.Context, rs resourceSpec) error {
	db, err := rs.Server.mysqlDB()
	if err != nil {
		return fmt.Errorf("chaos: resource database: %w", err)
	}
	defer db.Close()
	if err := (fence.SQL{Dialect: fence.MySQL, Table: rs.Fence}).Migrate(ctx, db); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, fill(mysqlResource, rs.Table))
	return err
}

func openMySQLResource(rs resourceSpec) (resource, error) {
	db, err := rs.Server.mysqlDB()
	if err != nil {
		return nil, fmt.Errorf("chaos: resource database: %w", err)
	}
	return &mysqlResourceDB{db: db, spec: rs}, nil
}

type mysqlResourceDB struct {
	db   *sql.DB
	spec resourceSpec
}

func (r *mysqlResourceDB) read(ctx context.Context, key string) error {
	var epoch int64
	err := r.db.QueryRowContext(ctx, fill(mysqlRead, r.spec.Table), hex.EncodeToString([]byte(key))).Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

func (r *mysqlResourceDB) write(ctx context.Context, key string, epoch int64, owner string) (writeResult, error) {
	tx, err := r.db.BeginTx(ctx, nil) // the server's default isolation, as a user's would be
	if err != nil {
		return writeResult{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if res, err := fenceOutcome(fence.SQL{Dialect: fence.MySQL, Table: r.spec.Fence}.Check(ctx, tx, key, epoch)); err != nil || !res.accepted {
		return res, err
	}
	hexKey := hex.EncodeToString([]byte(key))
	if _, err := tx.ExecContext(ctx, fill(mysqlBump, r.spec.Table), hexKey, epoch, owner, epoch, owner); err != nil {
		return writeResult{}, err
	}
	out := writeResult{accepted: true}
	if err := tx.QueryRowContext(ctx, fill(mysqlBumped, r.spec.Table), hexKey).Scan(&out.seq, &out.prev); err != nil {
		return writeResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return writeResult{}, err
	}
	return out, nil
}

func (r *mysqlResourceDB) close() { _ = r.db.Close() }
