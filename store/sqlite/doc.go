// Package sqlite is Tenure's embedded lease store: one SQLite file, no
// server, no cgo (it runs on modernc.org/sqlite through database/sql).
//
// Several processes on one host may share the file. The database runs in WAL
// mode, every write takes SQLite's write lock up front (BEGIN IMMEDIATE, or a
// single auto-committed statement), and a busy timeout makes concurrent
// writers queue instead of failing. Within one process, writers to a file
// queue in Go before they ask SQLite (whose busy handler polls with sleeps),
// and that wait ends with the caller's context. Network file systems are not
// supported:
// SQLite's locking, and WAL in particular, needs a local disk.
//
// # Time
//
// Expiry is stamped by SQLite itself inside each statement, from the clock of
// the host that runs the statement (millisecond resolution, stored as INTEGER
// microseconds since the Unix epoch). Processes sharing a file share a host,
// hence a clock; the Go side never computes an expiry.
//
// # Schema
//
// One table (default "tenure_leases") holds one row per key, kept until
// [Store.Prune] deletes it; the row with the empty key keeps the epoch
// floor, so a key's epoch only grows:
//
//	key        TEXT PRIMARY KEY  -- binary collation: "Job" ≠ "job" ≠ "job "
//	owner      TEXT              -- "" after a revocation
//	epoch      INTEGER           -- +1 on every new term
//	expires_at INTEGER           -- µs since the epoch, SQLite's clock
//	released   INTEGER           -- 1 once the term was released
//	running    INTEGER           -- runner state last reported by the holder
//	updated_at INTEGER           -- µs, last write
//	change_seq    INTEGER        -- numbers acquisitions and releases (indexed)
//	change_origin INTEGER        -- random id of the writing process's hub
//	session       INTEGER        -- the session the term is on, 0 for none (indexed)
//
// # Sessions: one write per renewal
//
// A term starts on its own record; the first renewal that lists it puts it
// on a session of its owner and TTL, a row of the table "<table>:sessions"
// (id, owner, expires_at, version). While a record is on a session, its
// expiry is the session's, and its own expires_at holds a date a century
// ahead. Every change to which terms are on a session moves its version up
// in the same transaction. A renewal of exactly the terms the Store knows
// on its session (and of terms acquired since, which it puts on) at the
// version it knows writes the session alone: at 10,000 or 100,000 terms,
// one small UPDATE under the write lock every process on the file waits
// for, instead of a write per record. Anything else — a revocation, a
// release by another handle, a term left out — sends that renewal term by
// term, as before sessions; it takes off the session every term it does
// not list, with the session's expiry of then, so a term its holder gave
// up on without a release ends on its own rather than living as long as
// the session. Acquisitions never extend a session. A session its Store
// cannot renew in time ends with every term on it, and peers wait out the
// grace as after a crash. session.go has the details.
//
// Mixed versions: a version of this package from before sessions reads
// only a record's own expires_at, so it sees a term on a session as live
// and never takes it over; a trigger turns its revocation (its owner
// emptied) into one that also takes the term off its session, so the holder
// still finds it lost at its next renewal. To go back to such a version,
// stop the replicas and let their terms end, then run this version's
// Prune (tenure prune): a record on a session is otherwise live forever to
// the older version. Prune also deletes a dead session once no record is
// on it.
//
// A table made before change_seq or session existed gets the columns (and
// the indexes, and the session table) when a Store opens it to write; its
// old rows carry 0, and a read-only Store reads such a table as it is. A version of this
// package that predates them still reads and writes the table correctly, but
// its changes are not numbered, so other processes' watches miss them.
//
// The table is created when a [Store] opens; [Store.Migrate] does it
// explicitly. A Store opened with Options.ReadOnly creates nothing: it
// reads an existing file and table, or fails with store.ErrNotFound.
//
// # Push events
//
// [Store.Watch] delivers events between every Store of the same file and
// table in this process as they happen, so a release is seen at once by a
// peer in the same process.
//
// SQLite cannot push to other processes, so while a watch is active a
// poller (one per file and table in the process) looks every
// Options.WatchPoll (50ms by default) at PRAGMA data_version on a connection
// of its own. The value changes only when another connection commits, so an
// idle file costs one tiny query per look and no table read. When it has
// changed, the poller reads the rows whose change_seq is above the last one
// it saw: every acquisition and release takes the next number under the
// write lock (renewals and revocations take none, so the steady renewals of
// a busy file cost one empty index seek per look). Rows written through
// this process's own Stores carry its change_origin and are skipped, since
// they were delivered as they happened. A release in one process thus
// reaches a peer process's engine within about one interval, and the peer
// acquires at once instead of at its next supervision round.
//
// # URLs
//
// [OpenURL] and [ParseURL] accept:
//
//	sqlite:PATH            PATH as written: relative to the working directory, or absolute
//	sqlite:/abs/path.db    absolute
//	sqlite:///abs/path.db  absolute (the empty-host form of a file URL)
//
// with optional query parameters table=NAME, busy_timeout=DURATION (a Go
// duration such as 5s) and watch_poll=DURATION or watch_poll=off. The path is percent-decoded, so a '?' in a file name
// is written %3F. A host (sqlite://name/…) is rejected rather than guessed
// at: write sqlite:name/… for a relative path. There is no ~ expansion.
package sqlite
