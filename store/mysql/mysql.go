package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/tenure-dev/tenure/store"
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
	if opts.ReadOnly {
		if err := s.access.CheckTable(ctx, "?table= or database"); err != nil {
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

// Migrate creates the lease table if it does not exist.
func (s *Store) Migrate(ctx context.Context) error { return denied(s.access.Migrate(ctx)) }

// Server error numbers the store reacts to.
const (
	errNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	errDeadlock    = 1213 // ER_LOCK_DEADLOCK
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

func (s *Store) migrate(ctx context.Context) error {
	// An existing table needs no DDL, and a user without the CREATE
	// privilege may still use it.
	exists, err := s.tableExists(ctx)
	if err != nil || exists {
		return err
	}
	// Unlike PostgreSQL's, MySQL's and MariaDB's CREATE TABLE IF NOT EXISTS
	// is safe against itself: the statement holds an exclusive metadata
	// lock on the name, so a concurrent one waits and then finds the table.
	if _, err := s.db.ExecContext(ctx, s.q.create); err != nil {
		return fmt.Errorf("mysql: create table %s: %w", s.table, err)
	}
	return nil
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
