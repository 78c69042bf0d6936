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
// One table (default "tenure_leases") holds one row per key, kept forever so
// that a key's epoch only grows:
//
//	key        TEXT PRIMARY KEY  -- binary collation: "Job" ≠ "job" ≠ "job "
//	owner      TEXT              -- "" after a revocation
//	epoch      INTEGER           -- +1 on every new term
//	expires_at INTEGER           -- µs since the epoch, SQLite's clock
//	released   INTEGER           -- 1 once the term was released
//	running    INTEGER           -- runner state last reported by the holder
//	updated_at INTEGER           -- µs, last write
//
// The table is created when a [Store] opens; [Store.Migrate] does it
// explicitly.
//
// # Push events
//
// [Store.Watch] delivers events between every Store of the same file and
// table in this process, so a release is seen at once by a peer in the same
// process. Other processes get nothing pushed: their engine finds a release
// on its next poll.
//
// # URLs
//
// [OpenURL] and [ParseURL] accept:
//
//	sqlite:PATH            PATH as written: relative to the working directory, or absolute
//	sqlite:/abs/path.db    absolute
//	sqlite:///abs/path.db  absolute (the empty-host form of a file URL)
//
// with optional query parameters table=NAME and busy_timeout=DURATION (a Go
// duration such as 5s). The path is percent-decoded, so a '?' in a file name
// is written %3F. A host (sqlite://name/…) is rejected rather than guessed
// at: write sqlite:name/… for a relative path. There is no ~ expansion.
package sqlite
