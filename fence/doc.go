// Package fence makes a downstream SQL database refuse writes made on
// behalf of a lease that a newer holder has already replaced.
//
// # Why
//
// A lease says who may work on a key, but a holder cannot always know that
// it has lost one. A process paused by a long GC, SIGSTOP, a frozen VM or a
// saturated host wakes up with its runner still inside a write, after its
// lease expired and a peer started a new term. Tenure cancels the runner's
// context as early as it can, but no timer fires while a process is frozen;
// the write it was about to send goes out the moment it thaws.
//
// Epochs fix this where the write lands. Every term of a key has an epoch
// greater than every earlier one, and the runner receives it with its
// lease. The fence table in your own database remembers, per key, the
// highest epoch that has written. A write carrying an older epoch is
// refused inside the same transaction, so it never commits.
//
// # The pattern
//
// Create the table once ([Pgx.Migrate], [SQL.Migrate], or the DDL from
// CreateTableSQL in your migration files). Then make [Pgx.Check] or
// [SQL.Check] the first statement of every transaction written on behalf of
// the lease, with the lease's FenceKey and Epoch (a command run by tenure
// run or tenure pool gets them in TENURE_FENCE_KEY and TENURE_EPOCH):
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := fence.Pgx{}.Check(ctx, tx, lease.FenceKey, lease.Epoch); err != nil {
//			return err // rolls back; errors.Is(err, fence.ErrStaleEpoch) means: stop, the lease is gone
//		}
//		_, err := tx.Exec(ctx, "UPDATE accounts SET synced_at = now() WHERE id = $1", id)
//		return err
//	})
//
// Check records the epoch when it is equal to or newer than the stored one,
// so one holder passes as often as it likes during its term and the first
// write of a new term moves the fence forward for good. An older epoch gets
// [ErrStaleEpoch] (a *[StaleEpochError] carrying the newer epoch); roll the
// transaction back and stop the work — treat it exactly like a lost lease.
//
// A new holder may also call Check once outside any transaction when it
// starts (on a pool, which commits at once) to shut out an old holder before
// its own first real write.
//
// # What it guarantees
//
// Check locks the key's fence row (PostgreSQL, MySQL) or the database's
// write lock (SQLite) until the caller's transaction ends. Transactions on the same key
// therefore run one after another, and the order is the epoch order: no
// write of epoch N commits after a write of epoch N+1. A stale Check that
// arrives while the newer holder's transaction is open waits for it to end,
// then refuses. A Check of the current holder that arrives while an older
// holder's transaction is still open waits for that one too — the older
// holder passed the fence before it was replaced, so its transaction is
// ordered first. This is ordering, not wall-clock exclusion: keep fenced
// transactions short, since a newer holder waits for them. Lock waits are
// bounded only by ctx and the database's lock_timeout / busy timeout.
//
// # What it does not protect
//
//   - Writes made outside the fenced transaction: in another transaction
//     without a Check, through another connection, on a pool with
//     autocommit, or after the transaction committed.
//   - Effects outside this database: sending a message, calling an API,
//     writing a file. Fence those with the epoch where they land, or make
//     them idempotent.
//   - Transactions that ignore the error and commit anyway.
//   - A forgotten epoch. The fence trusts the lease store never to hand out
//     an epoch it handed out before; if you wipe or replace the lease store
//     so that epochs restart, delete the fence rows too, or every new holder
//     is refused as stale. Conversely, never delete a fence row while an old
//     holder might still be alive.
//   - Two lease series on one row. Each key's epochs count on their own,
//     so a row must belong to one series: fence with Lease.FenceKey, not
//     Lease.Key, which a pool's key shares with a singleton of that name
//     and with the same key of every other pool. (Earlier versions
//     documented Key. To move a pool that fences with Key while it runs,
//     check both keys in each transaction, Key and then FenceKey, until
//     every replica does; only then drop the check of Key.)
//
// # Isolation levels
//
// Under PostgreSQL's default READ COMMITTED, Check always answers from the
// latest committed epoch. Under REPEATABLE READ or SERIALIZABLE, a Check
// that races a newer holder's commit fails with a serialization error
// (SQLSTATE 40001) instead of ErrStaleEpoch; roll back and retry as usual
// for those levels, and the retry is refused cleanly. On MySQL and MariaDB
// (InnoDB) the check is a locking upsert followed by a locking read, which
// see the latest committed epoch at any isolation level, whenever the
// transaction took its snapshot. On SQLite, Check must be the first
// statement of the transaction (or begin it IMMEDIATE); see [SQL.Check].
//
// # The table
//
// One row per key: lease_key (byte-exact primary key: text COLLATE "C" on
// PostgreSQL, SQLite's default BINARY collation, VARBINARY on MySQL),
// epoch, updated_at (the database's clock, UTC on MySQL, when the epoch was
// last recorded). The name is
// [DefaultTable] unless set, and must be a plain identifier; it is checked
// with store.ValidateName before it reaches any SQL. Keys are checked with
// store.ValidateKey, like every lease key.
package fence
