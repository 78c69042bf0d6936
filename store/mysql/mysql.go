package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "tenure_leases"

// Options configures a Store. The zero value uses the defaults.
type Options struct {
	// Table is the lease table, in the connection's database. It must match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$ and is quoted, so a reserved word is
	// fine. Empty means the URL's ?table= for Open, else DefaultTable.
	Table string

	// NoAutoMigrate stops the store from creating its table on first use,
	// for deployments whose application user may not run DDL; run
	// [Store.Migrate] (tenure migrate) as a privileged user instead.
	NoAutoMigrate bool

	// ReadOnly opens an existing table to read it, for tools that only
	// look (tenure status): the store never creates or migrates its table,
	// Open fails with store.ErrNotFound when the table does not exist, and
	// every call but List fails with store.ErrReadOnly.
	ReadOnly bool
}

// Store is a lease store on a MySQL or MariaDB table. It is safe for
// concurrent use.
type Store struct {
	db     *sql.DB
	ownsDB bool
	table  string // validated, unquoted
	q      queries

	lane   *renewLane // a connection of their own for renewals
	closed atomic.Bool
	// floorReady: the floor row is known to exist (see ensureFloor).
	floorReady atomic.Bool
	// access clears each call: none once closed, no write when read-only,
	// and the table created on first use.
	access sqlstore.Access

	// book is what this Store knows of its sessions (session.go), and
	// opening serialises opening one.
	book    sessionbook.Book
	opening sync.Mutex
	// legacy says the table predates sessions: a read-only Store lists it
	// as it is.
	legacy atomic.Bool
}

// Compile-time checks of the capabilities the engine and the CLI look for.
// There is no store.Watcher: MySQL has no push channel, so peers poll.
var (
	_ store.Store    = (*Store)(nil)
	_ store.Migrator = (*Store)(nil)
	_ store.Revoker  = (*Store)(nil)
)

// Open connects to the server at rawURL,
//
//	mysql://user:password@host:3306/database?table=leases&tls=true
//
// and checks that it answers. The port defaults to 3306; ?socket=/path
// connects through a Unix socket instead of host:port; ?table= names the
// lease table when opts.Table is empty; every other parameter goes to
// go-sql-driver/mysql as in its DSNs (tls, timeout, … or a system
// variable to set on each connection, such as sql_mode or wait_timeout).
// A parameter that is neither the driver's nor a MySQL or MariaDB system
// variable, such as a misspelt one, is refused with store.ErrInvalidURL
// before anything connects, naming the known parameter nearest to it: the
// server would fail every connection on it. (A variable newer than those
// Tenure knows goes in the Params of the configuration [ParseURL] returns,
// for a handle given to [New].) Open turns on the driver's
// interpolateParams, so each call is one round trip instead of a prepare
// and an execute, and sets the session time_zone to '+00:00' unless the
// URL sets them. The password never appears in a returned error. Close
// closes the connection pool.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	cfg, urlTable, shown, secrets, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opts.Table == "" {
		opts.Table = urlTable
	}
	s, err := newStore(nil, opts)
	if err != nil {
		return nil, err
	}
	connector, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %s: %w: %w", shown, store.RedactError(err, secrets...), store.ErrInvalidURL)
	}
	db := sql.OpenDB(connector)
	// Servers close idle sessions after wait_timeout; recycling sooner
	// spares a renewal the cost of finding a dead connection.
	db.SetConnMaxLifetime(3 * time.Minute)
	db.SetMaxIdleConns(4)
	// sql.OpenDB connects lazily; a ping turns a wrong host, database or
	// password into an error here rather than at the first renewal.
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: connect to %s: %w", shown, store.RedactError(denied(err), secrets...))
	}
	s.db = db
	s.ownsDB = true
	var check func(context.Context) error
	switch {
	case opts.ReadOnly:
		check = s.checkReadOnly
	case opts.NoAutoMigrate:
		check = s.checkMigrated
	}
	if check != nil {
		if err := check(ctx); err != nil {
			db.Close()
			return nil, err
		}
	}
	return s, nil
}

// New makes a Store on an existing handle of go-sql-driver/mysql, whose
// DSN must name a database. Close leaves the handle open: it belongs to the
// caller. Add interpolateParams=true to its DSN for one round trip per call
// (without it the driver prepares every statement first), and keep the
// session time zone free of daylight-saving jumps ('+00:00' or 'SYSTEM' on
// a UTC host), which the store's clock needs to be exact (see the package
// documentation).
func New(db *sql.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: nil *sql.DB")
	}
	return newStore(db, opts)
}

func newStore(db *sql.DB, opts Options) (*Store, error) {
	table := opts.Table
	if table == "" {
		table = DefaultTable
	}
	if err := store.ValidateName("mysql: table", table); err != nil {
		return nil, err
	}
	s := &Store{db: db, table: table, q: buildQueries(table), lane: newRenewLane()}
	s.access = sqlstore.Access{
		Backend: "mysql", Table: table, ReadOnly: opts.ReadOnly, AutoMigrate: !opts.NoAutoMigrate,
		Closed: s.closed.Load, Exists: s.tableExists, Create: s.migrate,
	}
	return s, nil
}

// Table returns the name of the lease table.
func (s *Store) Table() string { return s.table }

// Close closes the connection pool of a Store made by Open. Calls after
// Close fail with store.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.lane.close()
	if !s.ownsDB {
		return nil
	}
	return s.db.Close()
}

// Migrate creates the lease table if it does not exist, and gives a table
// made before sessions what they need (session.go).
func (s *Store) Migrate(ctx context.Context) error { return denied(s.access.Migrate(ctx)) }

// Drop drops the lease table and its session table, for tests and tools
// that clean up after themselves. A read-only Store fails with
// store.ErrReadOnly.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.access.Write(ctx); err != nil {
		return denied(err)
	}
	if _, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+s.table+"`, "+sessionTable(s.table)); err != nil {
		return denied(fmt.Errorf("mysql: drop table %s: %w", s.table, err))
	}
	return nil
}

// Server error numbers the store reacts to.
const (
	errNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
	errNoSuchColumn = 1054 // ER_BAD_FIELD_ERROR
	errDeadlock     = 1213 // ER_LOCK_DEADLOCK
	// ER_LOCK_WAIT_TIMEOUT: a metadata lock waited lock_wait_timeout (or
	// a row lock innodb_lock_wait_timeout).
	errLockWaitTimeout = 1205
)

// tableExists probes the table, which needs no privilege beyond reading it
// (CREATE TABLE IF NOT EXISTS checks the CREATE privilege before it looks
// for the table).
func (s *Store) tableExists(ctx context.Context) (bool, error) {
	_, err := s.db.ExecContext(ctx, s.q.probe)
	switch {
	case err == nil:
		return true, nil
	case isServerError(err, errNoSuchTable):
		return false, nil
	}
	return false, fmt.Errorf("mysql: look up table %s: %w", s.table, err)
}

// hasSessions reports whether the table has its session column and
// session table (session.go). It probes them, as tableExists does, which
// a user that may only read the table may do. migrate creates the
// session table last, so that it is the mark of a whole migration.
func (s *Store) hasSessions(ctx context.Context) (bool, error) {
	for _, probe := range []string{s.q.probeColumn, s.q.probeSessions} {
		_, err := s.db.ExecContext(ctx, probe)
		switch {
		case isServerError(err, errNoSuchTable) || isServerError(err, errNoSuchColumn):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("mysql: look up the sessions of table %s: %w", s.table, err)
		}
	}
	return true, nil
}

// checkReadOnly makes a read-only Store fail on a missing table, and list
// a table made before sessions as it is.
func (s *Store) checkReadOnly(ctx context.Context) error {
	if err := s.access.CheckTable(ctx, "?table= or database"); err != nil {
		return err
	}
	ok, err := s.hasSessions(ctx)
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
	ok, err := s.hasSessions(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("mysql: table %s predates sessions (one row renews a process's leases) and this Store may not add them: run `tenure migrate` (Store.Migrate) as a user that may alter the table, before starting replicas of this version; older replicas run on with it", s.table)
	}
	return err
}

// listSQL returns the list statements for the table's layout. A read-only
// Store on a table made before sessions looks again each time, so it
// follows the table when another Store migrates it.
func (s *Store) listSQL(ctx context.Context) (list, listAll string, err error) {
	if s.legacy.Load() {
		ok, err := s.hasSessions(ctx)
		if err != nil || !ok {
			return s.q.listLegacy, s.q.listAllLegacy, err
		}
		s.legacy.Store(false)
	}
	return s.q.list, s.q.listAll, nil
}

func (s *Store) migrate(ctx context.Context) error {
	// A table with sessions needs no DDL, and a user without the CREATE
	// privilege may still use it.
	exists, err := s.tableExists(ctx)
	if err == nil && exists {
		var ok bool
		if ok, err = s.hasSessions(ctx); err == nil && ok {
			return nil
		}
	}
	if err != nil {
		return err
	}
	if err := s.ddl(ctx); err != nil {
		return fmt.Errorf("mysql: create table %s: %w", s.table, err)
	}
	return nil
}

// migrateWait bounds the wait for another process's migration.
const migrateWait = 60 // seconds

// ddl creates the table, or gives one made before sessions what sessions
// need, each part only where it is missing. MySQL's and MariaDB's CREATE
// TABLE IF NOT EXISTS is safe against itself (the statement holds an
// exclusive metadata lock on the name), but a check and an ALTER TABLE is
// not: a named lock (GET_LOCK, held by the connection) serialises
// migrations across processes. The session table comes last (see
// hasSessions). No trigger: with one on the table, MariaDB leaves
// LAST_INSERT_ID(expr) out of an UPDATE's OK packet, where an older
// version reads the epoch of its takeovers.
//
// ALTER TABLE waits for the table's metadata lock behind every open
// transaction that has used the table (a long query, a dump), and every
// statement on the table after it waits behind it: the renewals of every
// replica still running, which would lose their keys. So the connection
// waits ddlLockWait at most for a metadata lock (lock_wait_timeout, whole
// seconds, 1 at least), and the DDL goes again after ddlRetryPause, in
// which those statements run, until ctx ends.
func (s *Store) ddl(ctx context.Context) (err error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, migrateLock(s.table), migrateWait).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return fmt.Errorf("another migration held the lock %s for %ds", migrateLock(s.table), migrateWait)
	}
	defer func() {
		// The lock and the wait limit outlive the statement, and the
		// connection goes back to the pool: both must go even when ctx
		// has ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), laneOpenTimeout)
		defer cancel()
		_, rerr := c.ExecContext(rctx, `DO RELEASE_LOCK(?)`, migrateLock(s.table))
		if rerr == nil {
			_, rerr = c.ExecContext(rctx, `SET SESSION lock_wait_timeout = DEFAULT`)
		}
		if rerr != nil {
			_ = c.Raw(func(any) error { return driver.ErrBadConn }) // drop the connection, and the lock with it
			if err == nil {
				err = rerr
			}
		}
	}()
	if _, err := c.ExecContext(ctx, fmt.Sprintf(`SET SESSION lock_wait_timeout = %d`, int(ddlLockWait/time.Second))); err != nil {
		return err
	}
	for {
		err := s.ddlOnce(ctx, c)
		if !isServerError(err, errLockWaitTimeout) {
			return err
		}
		select {
		case <-time.After(ddlRetryPause):
		case <-ctx.Done():
			return fmt.Errorf("another transaction holds a lock on the table (a long query, a dump): %w", err)
		}
	}
}

// ddlLockWait bounds how long one attempt of ddl waits for a metadata
// lock, and so how long it can hold up the statements queued behind it;
// ddlRetryPause is the pause between attempts. Variables for the tests.
var ddlLockWait, ddlRetryPause = time.Second, 300 * time.Millisecond

// ddlOnce runs the DDL on c, each statement a no-op where its work is done.
func (s *Store) ddlOnce(ctx context.Context, c *sql.Conn) error {
	if _, err := c.ExecContext(ctx, s.q.create); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, s.q.probeColumn); isServerError(err, errNoSuchColumn) {
		if _, err := c.ExecContext(ctx, s.q.addColumn); err != nil {
			return fmt.Errorf("add the session column: %w", err)
		}
	} else if err != nil {
		return err
	}
	_, err := c.ExecContext(ctx, s.q.createSessions)
	return err
}

// denied marks as store.ErrDenied the errors by which MySQL and MariaDB
// refuse credentials or rights: access denied to the user, the database,
// a table, a column or a routine, a privilege missing, an unknown
// database. A read-only server (1290) is not among them: a failover may
// make it writable.
func denied(err error) error {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1049, 1142, 1143, 1227, 1370, 1698:
			return store.Denied(err)
		}
	}
	return err
}

func isServerError(err error, number uint16) bool {
	var me *mysqldrv.MySQLError
	return errors.As(err, &me) && me.Number == number
}
