// Package mysql is Tenure's MySQL and MariaDB lease store, built on
// go-sql-driver/mysql through database/sql. It needs JSON_TABLE: MySQL 8.0
// or MariaDB 10.6 and later, with InnoDB.
//
// One table holds a row per key (created on first use, or by
// [Store.Migrate]), kept until [Store.Prune] deletes it, which first
// raises the epoch floor (the row with the empty key) so that a key's
// epoch only grows. Every decision is taken by the server on its own
// clock, read once the rows a decision depends on are locked:
//
//   - Renew writes one row, the owner's session (below), when the terms
//     listed are those the Store knows on it: one auto-committed UPDATE
//     whatever the number of keys. Otherwise it takes at most three round
//     trips of auto-committed statements while its terms fit one
//     JSON_TABLE batch of 1 MiB (tens of thousands of keys; one more per
//     further batch; one more when it leaves out a term on the session
//     that the Store did not know there, and again one more when another
//     call changed the session meanwhile), so that it completes on a
//     network slow enough that a call's timeout allows no more.
//   - Acquire of a key whose record is on no session is one UPDATE (its
//     OK packet carries the new epoch), after the owner's first
//     acquisition for a TTL, which opens its session with an INSERT. A
//     refused one adds a read of the holder, a key never seen adds an
//     INSERT, and a record on a session whose term is over (a failover:
//     every held key is on one after its first renewal) is taken by a
//     third statement that locks the session first: three round trips.
//   - Release and Revoke are a plain read and one auto-committed UPDATE
//     for the terms on their own records and one per session the terms
//     are on, which locks the session first (two round trips for one
//     session), and again when what the read found moved meanwhile.
//
// No call holds a lock across round trips (only Prune and the migration
// use transactions), so a client that stalls or goes away mid-call holds
// up no other one.
//
// There is no push channel ([store.Watcher]): peers find a release at their
// next poll.
//
// # Sessions
//
// Sessions make a renewal one row written however many keys a process
// holds: a term starts on its own record, and the first renewal that lists
// it puts it on a session of its owner and TTL, a row of the table
// "<table>:sessions" (id, owner, expires_at, version, tag),
// whose expiry is then the record's. A renewal of exactly the terms the
// Store knows on its session, at the version it knows, updates that row
// alone (100,000 keys: well under a millisecond on a local server; the
// per-record UPDATE it replaces took about a second); anything else — a
// revocation, a release by another handle, a term left out — goes term by
// term, and takes off the session every term it does not renew, with the
// session's expiry as it stands then (never less than a concurrent
// renewal of the same owner promised), so that a term its holder gave up
// on ends on its own within a TTL. Acquisitions never extend a session.
// session.go has the rules and the order locks are taken in.
//
// A table made before sessions gets the session column (with an index on
// session and owner) and the session table when a Store opens it to
// write, or at tenure migrate, under a named lock (GET_LOCK) that
// serialises migrations across processes; a read-only Store lists such a
// table as it is, and a Store with NoAutoMigrate refuses it at [Open],
// saying to run tenure migrate. Adding the column waits for the table's
// metadata lock behind any open transaction that has used the table, and
// holds up every statement on it meanwhile, so each attempt waits a
// second at most (lock_wait_timeout) and goes again after a pause, in
// which older replicas' renewals get through, until its context ends.
//
// # Mixed versions and going back
//
// A version of this package from before sessions runs on a migrated
// table, beside this one. A record on a session keeps an expires_at a
// century ahead (2126), so such a version, which reads only that column,
// sees the term live and never takes it over; it acquires and renews
// terms on their own records as before, and reads the epoch of a takeover
// from the UPDATE's OK packet (which is why the table has no trigger:
// with one, MariaDB leaves it out). It never holds a term on a session —
// only a renewal of this version puts one there — so it never releases
// one. It may revoke one (tenure release): it empties the owner and
// leaves the term on its session. The holder's steady renewal requires
// that no record on its session has an empty owner, so its next renewal
// goes term by term, finds the term lost (its epoch moved on), and takes
// it off with the session's expiry as it stands then; meanwhile the record
// reads as owned by nobody, blocking until that expiry, and peers wait for
// it + grace, as after this version's revocation. To go back to such a
// version, stop the replicas and let their terms end, then run this
// version's Prune (tenure prune): a record on a session is otherwise live
// forever to the older version.
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
//	renew_id   BIGINT          -- random id of the last call that wrote it
//	session    BIGINT          -- the session the term is on, 0 for none (indexed with owner)
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
