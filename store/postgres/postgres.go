// Package postgres is Tenure's PostgreSQL lease store, built on jackc/pgx v5.
//
// One table holds a row per key (created on first use, or by [Store.Migrate]).
// Every decision is taken by a single statement on the server's clock,
// clock_timestamp() — not now(), which is frozen at the start of the
// transaction. Statements that may wait behind a row lock take their locks
// first and read the clock afterwards, so a renewal that queued behind
// another transaction never stamps an expiry from before its wait.
//
// Renew and Release send one statement for the whole batch (arrays unnested
// on the server). Release and Acquire send NOTIFY on a channel named like the
// table, which [Store.Watch] turns into events so peers take a released key
// at once instead of at their next poll.
//
// Behind a pooler in transaction mode (PgBouncer), add
// default_query_exec_mode=exec to the URL (pgx's statement cache needs a
// session) and expect Watch to stay silent: LISTEN needs a session too, and
// the engine then polls.
//
// With a streaming standby, list every host and ask for the primary:
// postgres://app@db1,db2/ops?target_session_attrs=read-write. A standby
// promoted after its primary died may lack the primary's last commits
// (with asynchronous replication); the store notices the promotion (the
// server's timeline changed) on its first acquisition there, grants no
// term for TTL + grace, so that every holder whose term was lost has
// failed closed, and raises every later epoch above any the old primary
// issued. Terms the new primary holds renew on. With synchronous
// replication (synchronous_standby_names set, synchronous_commit on or
// remote_apply) nothing acknowledged is lost and the quarantine only
// delays takeovers. SAFETY.md has the figures.
//
// [Open] refuses a URL parameter that is neither pgx's, Tenure's ?table=
// nor a PostgreSQL setting (a misspelling, most often) before it connects,
// rather than let the server fail the connection on it.
//
// Table layout (the key column uses the "C" collation, so keys compare byte
// for byte: "Job", "job" and "job " are three keys):
//
//	key        text COLLATE "C" PRIMARY KEY -- '' for the floor row
//	owner      text        -- '' after a revocation; the floor row: the server
//	epoch      bigint      -- strictly increasing per key, never reset
//	expires_at timestamptz
//	released   boolean
//	running    boolean     -- the holder's runner state
//	updated_at timestamptz
//	session    bigint      -- the session the term is on, 0 for none (indexed)
//
// Sessions make a renewal one row written however many keys a process
// holds: a term starts on its own record, and the first renewal that lists
// it puts it on a session of its owner and TTL, a row of the table
// "<table>:sessions" (id, owner, expires_at, renewed_at, version), whose
// expiry is then the record's. A renewal of exactly the terms the Store
// knows on its session, at the version it knows, updates that row alone
// (100,000 keys: about 1 ms, a commit's flush); anything else — a
// revocation, a release by another handle, a term left out — goes term by
// term, and takes off the session every term it does not list, with the
// session's expiry of then, so that a term its holder gave up on ends on
// its own. Acquisitions never extend a session. session.go has the rules
// and the order locks are taken in. A table made before sessions gets the
// column, the session table and a trigger when a Store opens it to write
// (or at tenure migrate); a read-only Store lists such a table as it is.
// Adding the column needs the table's exclusive lock: the migration waits
// for it 200 ms at a time, letting the older replicas' statements through
// in between, so a long transaction on the table (a pg_dump) delays the
// migration, never their renewals.
//
// Mixed versions: a record on a session keeps an expires_at a century
// ahead, so a version of this package from before sessions, which reads
// only that column, sees the term live and never takes it over; the
// trigger turns its revocation (its owner emptied) into one that also takes
// the term off its session, so the holder still finds it lost. To go back
// to such a version, stop the replicas and let their terms end, then run
// this version's Prune (tenure prune): a record on a session is otherwise
// live forever to the older version.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
	"github.com/tenure-dev/tenure/store/internal/watchset"
)

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "tenure_leases"

// Options configures a Store. The zero value uses the defaults.
type Options struct {
	// Table is the lease table, unqualified (the connection's search_path
	// picks the schema; set it in the URL, e.g. ?search_path=ops). It must
	// match ^[A-Za-z_][A-Za-z0-9_]{0,62}$ and is quoted, so its case is
	// kept. The NOTIFY channel has the same name. Empty means the URL's
	// ?table= for Open, else DefaultTable.
	Table string

	// NoAutoMigrate stops the store from creating its table on first use,
	// for deployments whose application role may not run DDL; run
	// [Store.Migrate] (tenure migrate) with a privileged role instead.
	NoAutoMigrate bool

	// ReadOnly opens an existing table to read it, for tools that only
	// look (tenure status): the store never creates or migrates its table,
	// Open fails with store.ErrNotFound when the table does not exist, and
	// every call but List and Watch fails with store.ErrReadOnly.
	ReadOnly bool
}

// Store is a lease store on a PostgreSQL table. It is safe for concurrent
// use.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	lane     *renewLane // Open's, unless read-only; nil for New
	table    string     // validated, unquoted; also the NOTIFY channel
	ident    string     // quoted table identifier for SQL
	sql      statements
	// plain is sql without the server's identity, and noIdentity says
	// the server has shown it cannot tell it (promotion.go).
	plain      statements
	noIdentity atomic.Bool
	// access clears each call: none once closed, no write when read-only,
	// and the table created on first use.
	access sqlstore.Access
	// watches is the closed state and every running Watch, which Close
	// ends.
	watches watchset.Set

	// sess holds the statements of sessions (session.go); book is what
	// this Store knows of its own.
	sess sessionStatements
	book sessionbook.Book
	// legacy says the table predates sessions: a read-only Store lists it
	// as it is.
	legacy atomic.Bool
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Watcher  = (*Store)(nil)
	_ store.Migrator = (*Store)(nil)
	_ store.Revoker  = (*Store)(nil)
)

// Open connects to the PostgreSQL server at rawURL (postgres:// or
// postgresql://) and checks that it answers. Its parameters are ?table=,
// naming the lease table when opts.Table is empty, pgx's own (sslmode,
// pool_max_conns, default_query_exec_mode, …) and PostgreSQL settings for
// the session (search_path, application_name, statement_timeout, an
// extension's pg_stat_statements.track, …). Any other parameter, such as a
// misspelt one, is refused with store.ErrInvalidURL before anything
// connects, naming the known parameter nearest to it: pgx would send it to
// the server, which would fail the connection. A setting newer than those
// Tenure knows (PostgreSQL 15 to 18) can be passed as
// ?options=-c%20name%3Dvalue. The password never appears in a returned
// error. Close closes the pool.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	shown := store.RedactURL(rawURL)
	secrets := store.URLSecrets(rawURL)
	// pgx, like libpq, ends the user and password at the first '@', which
	// would make the tail of a password with an '@' in it a host name;
	// it gets the URL without the password and the password apart.
	rest, password, err := store.SplitURLPassword(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", shown, err)
	}
	u, err := url.Parse(rest)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		detail := "scheme must be postgres:// or postgresql://"
		if err != nil {
			// url.Parse's message repeats the URL; its cause does not.
			detail = "does not parse"
			var ue *url.Error
			if errors.As(err, &ue) {
				detail = store.RedactString(ue.Err.Error(), secrets...)
			}
		}
		return nil, fmt.Errorf("postgres: %s: %s: %w", shown, detail, store.ErrInvalidURL)
	}
	rest, urlTable, err := takeQuery(rest)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w: %w", shown, store.RedactError(err, secrets...), store.ErrInvalidURL)
	}
	if urlTable != "" {
		if err := store.ValidateName("table", urlTable); err != nil {
			return nil, fmt.Errorf("postgres: %s: %w: %w", shown, err, store.ErrInvalidURL)
		}
		if opts.Table == "" {
			opts.Table = urlTable
		}
	}
	cfg, err := pgxpool.ParseConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %s: %w", shown, store.RedactString(err.Error(), secrets...), store.ErrInvalidURL)
	}
	if password != "" {
		// The URL's password wins over .pgpass and PGPASSWORD, as in libpq.
		cfg.ConnConfig.Password = password
	}
	if pw := cfg.ConnConfig.Password; pw != "" {
		secrets = append(secrets, pw) // from ?password=, .pgpass or PGPASSWORD
	}
	s, err := newStore(nil, opts)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect to %s: %w", shown, store.RedactError(denied(err), secrets...))
	}
	// pgxpool connects lazily; a ping turns a wrong host, database or
	// password into an error here rather than at the first renewal.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", shown, store.RedactError(denied(err), secrets...))
	}
	s.pool = pool
	s.ownsPool = true
	if opts.ReadOnly {
		err := s.access.CheckTable(ctx, "?table=, database or search_path")
		if err == nil {
			err = s.checkSessions(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, err
		}
		return s, nil
	}
	if opts.NoAutoMigrate {
		if err := s.checkMigrated(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	if s.lane, err = newRenewLane(cfg); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect to %s: %w", shown, store.RedactError(err, secrets...))
	}
	return s, nil
}

// New makes a Store on an existing pool. Close leaves the pool open: it
// belongs to the caller. Unlike a Store from Open, it keeps no connection
// apart for renewals (see renewLane): give the pool room for them, or use
// Open on a slow network.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: nil pool")
	}
	s, err := newStore(pool, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func newStore(pool *pgxpool.Pool, opts Options) (*Store, error) {
	table := opts.Table
	if table == "" {
		table = DefaultTable
	}
	if err := store.ValidateName("postgres: table", table); err != nil {
		return nil, err
	}
	ident, sess := pgx.Identifier{table}.Sanitize(), sessionTable(table)
	s := &Store{pool: pool, table: table, ident: ident, sql: buildStatements(ident, sess, true),
		plain: buildStatements(ident, sess, false), sess: buildSessionStatements(ident, sess)}
	s.access = sqlstore.Access{
		Backend: "postgres", Table: table, ReadOnly: opts.ReadOnly, AutoMigrate: !opts.NoAutoMigrate,
		Closed: s.watches.Closed, Exists: s.tableExists, Create: s.migrate,
	}
	return s, nil
}

// Table returns the name of the lease table (and of the NOTIFY channel).
func (s *Store) Table() string { return s.table }

// Close ends every watch and, for a Store made by Open, closes the pool.
// Calls after Close fail with store.ErrClosed.
func (s *Store) Close() error {
	if !s.watches.Close() {
		return nil
	}
	s.lane.close()
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}

// Migrate creates the lease table if it does not exist.
func (s *Store) Migrate(ctx context.Context) error { return denied(s.access.Migrate(ctx)) }

// tableExists looks the table up on the connection's search_path.
func (s *Store) tableExists(ctx context.Context) (bool, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.ident).Scan(&exists); err != nil {
		return false, fmt.Errorf("postgres: look up table %s: %w", s.table, err)
	}
	return exists, nil
}

// hasSessions reports whether the table has its session column, session
// table and trigger (session.go).
func (s *Store) hasSessions(ctx context.Context, q querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
	WHERE attrelid = to_regclass($1) AND attname = 'session' AND NOT attisdropped)
	AND to_regclass($2) IS NOT NULL
	AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $3)`,
		s.ident, s.sess.table, revokedTrigger).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("postgres: look up the sessions of table %s: %w", s.table, err)
	}
	return ok, nil
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkSessions makes a read-only Store list a table made before sessions
// as it is.
func (s *Store) checkSessions(ctx context.Context) error {
	ok, err := s.hasSessions(ctx, s.pool)
	if err == nil && !ok {
		s.legacy.Store(true)
	}
	return err
}

// checkMigrated fails, for a Store that may not migrate its table, when
// the table exists but predates sessions: every call would fail on it.
func (s *Store) checkMigrated(ctx context.Context) error {
	exists, err := s.tableExists(ctx)
	if err != nil || !exists {
		return err
	}
	ok, err := s.hasSessions(ctx, s.pool)
	if err == nil && !ok {
		err = fmt.Errorf("postgres: table %s predates sessions (one row renews a process's leases) and this Store may not add them: run `tenure migrate` (Store.Migrate) with a role that may alter the table, before starting replicas of this version; older replicas run on with it", s.table)
	}
	return err
}

// listSQL is the list statement for the table's layout. A read-only Store
// on a table made before sessions looks again each time, so it follows
// the table when another Store migrates it.
func (s *Store) listSQL(ctx context.Context) (string, error) {
	if s.legacy.Load() {
		if ok, err := s.hasSessions(ctx, s.pool); err != nil || !ok {
			return s.sql.listLegacy, err
		}
		s.legacy.Store(false)
	}
	return s.sql.list, nil
}

func (s *Store) migrate(ctx context.Context) error {
	// An existing table with sessions needs no DDL, and a role without
	// CREATE on the schema may still use it.
	exists, err := s.tableExists(ctx)
	if err == nil && exists {
		var ok bool
		if ok, err = s.hasSessions(ctx, s.pool); err == nil && !ok {
			err = s.ddl(ctx, false)
		}
		return err
	}
	if err == nil {
		err = s.ddl(ctx, true)
		if err != nil && s.identityUnsupported(err) {
			err = s.ddl(ctx, true)
		}
	}
	return err
}

// ddl creates the table (create), or gives one made before sessions what
// sessions need. CREATE TABLE IF NOT EXISTS is not safe against itself:
// two sessions creating the same table at once can both pass the check and
// one then fails with a unique violation on pg_type. A transaction-scoped
// advisory lock per table name serialises them across processes; every
// statement is a no-op where its work is done, and none takes the table's
// exclusive lock then. The floor row of a new table names the server from
// the start (promotion.go), in the same transaction: a table is never seen
// without it.
//
// Adding the session column takes the table's exclusive lock, and a lock
// request waits behind every open transaction on the table (a long
// query, a pg_dump) while every statement after it waits behind it: the
// renewals of every replica still running, which would lose their keys.
// So each attempt waits ddlLockWait at most, and the DDL goes again after
// ddlRetryPause, in which those statements run, until ctx ends.
func (s *Store) ddl(ctx context.Context, create bool) error {
	ddl := []string{s.sql.create, s.sess.addColumn, s.sess.createSessions, s.sess.sessionIndex,
		s.sess.revokedFunction, s.sess.revokedTrigger}
	if create {
		ddl = append(ddl, s.statements().nameServer)
	}
	for {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockID(s.table)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", ddlLockWait.Milliseconds())); err != nil {
				return err
			}
			for _, q := range ddl {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			select {
			case <-time.After(ddlRetryPause):
				continue
			case <-ctx.Done():
				err = fmt.Errorf("another transaction holds a lock on the table (a long query, a dump): %w", err)
			}
		}
		if err != nil {
			return fmt.Errorf("postgres: create table %s: %w", s.table, err)
		}
		return nil
	}
}

// ddlLockWait bounds how long one attempt of ddl waits for a table lock,
// and so how long it can hold up the statements queued behind it;
// ddlRetryPause is the pause between attempts. Variables for the tests.
var ddlLockWait, ddlRetryPause = 200 * time.Millisecond, 300 * time.Millisecond

// migrateLockID is the advisory lock key guarding the creation of table.
func migrateLockID(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("tenure/postgres/migrate:" + table))
	return int64(h.Sum64())
}

// Drop deletes the lease table and what this package keeps beside it (the
// session table, the function of the trigger that older versions'
// revocations fire), for a table made for a while: `tenure verify`'s
// scratch table, a test's. Every lease in it is gone, so no replica may
// be using it. The Store is only good for Close afterwards. A session
// table and a function whose names were cut short (a table name of over
// 54 bytes) may be another table's too (see sessionTable): they stay, or
// that table's live terms would end at once.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.access.Write(ctx); err != nil {
		return denied(err)
	}
	drop := []string{`DROP TABLE IF EXISTS ` + s.ident} // and its trigger
	if len(s.table) <= 63-len(":sessions") {
		drop = append(drop, `DROP FUNCTION IF EXISTS `+revokedFunction(s.ident)+`()`, `DROP TABLE IF EXISTS `+s.sess.table)
	}
	for _, q := range drop {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return denied(fmt.Errorf("postgres: drop table %s: %w", s.table, err))
		}
	}
	return nil
}
