// Package mysql is Tenure's MySQL and MariaDB lease store, built on
// go-sql-driver/mysql through database/sql. It needs JSON_TABLE: MySQL 8.0
// or MariaDB 10.6 and later, with InnoDB.
//
// One table holds a row per key (created on first use, or by
// [Store.Migrate]), kept until [Store.Prune] deletes it, which first
// raises the epoch floor (the row with the empty key) so that a key's
// epoch only grows. Every
// statement runs on its own (autocommit), and every decision is taken by
// the server inside one statement, on its own clock:
//
//   - Renew and Release send one statement for the whole batch: an UPDATE
//     joined to a JSON_TABLE of the items. A renewal learns from the row
//     count alone that every term was renewed; only when some were lost
//     does it read which, by the random id the statement wrote into the
//     rows it renewed. Batches over 1 MiB of JSON are split.
//   - Acquire is one UPDATE for a key that has a record; a refused one adds
//     a read of the holder, and a key never seen adds an INSERT.
//   - Revoke is one UPDATE.
//
// There is no push channel ([store.Watcher]): peers find a release at their
// next poll.
//
// # Time
//
// Expiry is stored as BIGINT microseconds since the Unix epoch on the
// server's clock. Writes read the clock with SYSDATE(6), the time the row
// is evaluated: NOW(6) and UTC_TIMESTAMP(6) are frozen when the statement
// starts, so a renewal that waited behind another transaction's row lock
// would stamp an expiry from before its wait, and could renew a term that
// expired during it. A server started with --sysdate-is-now breaks this;
// do not use it. SYSDATE is in the session's time zone and is turned into
// UTC without a time-zone conversion (see nowUS in queries.go); [Open]'s
// sessions use time_zone '+00:00' in any case.
//
// SYSDATE is unsafe for statement-based replication: use binlog_format ROW
// (MySQL's default) or MIXED (MariaDB's), under which replicas copy the
// stamped values.
//
// # Schema
//
//	lease_key  VARBINARY(512) PRIMARY KEY  -- bytes: "Job" ≠ "job" ≠ "job "
//	owner      VARBINARY(512)  -- '' after a revocation
//	epoch      BIGINT          -- +1 on every new term, never reset
//	expires_at BIGINT          -- µs since the Unix epoch, server clock
//	released   BOOLEAN         -- the term ended by release
//	running    BOOLEAN         -- runner state last reported by the holder
//	updated_at BIGINT          -- µs, last write
//	renew_id   BIGINT          -- random id of the last Renew call that extended it
//
// Keys are binary strings, not text under a collation: a case-insensitive
// or PAD SPACE collation would make "Job", "job" and "job " one key. Keys
// and owners travel to the server hex-encoded, so the connection's
// character set cannot change them either.
//
// # URLs
//
//	mysql://user:password@host:3306/database?table=leases&tls=true
//
// See [Open] for the parameters. One that is neither go-sql-driver/mysql's,
// Tenure's (table, socket) nor a MySQL or MariaDB system variable — a
// misspelling, most often — is refused before anything connects, rather
// than fail every connection at the server.
package mysql
