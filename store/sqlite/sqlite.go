package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
)

// Defaults applied to zero Options fields.
const (
	DefaultTable       = "tenure_leases"
	DefaultBusyTimeout = 5 * time.Second
	DefaultWatchPoll   = 50 * time.Millisecond
)

// Options configures a Store. The zero value means the defaults.
type Options struct {
	// Table is the lease table's name; it must match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$. Empty means DefaultTable.
	Table string

	// BusyTimeout is how long a statement waits for another connection's
	// write lock before failing. A context that ends sooner ends the wait
	// sooner. Zero means DefaultBusyTimeout.
	BusyTimeout time.Duration

	// ReadOnly opens an existing store to read it, for tools that only
	// look (tenure status): Open never creates a file, a directory or a
	// table, never migrates, and fails with store.ErrNotFound when the file
	// or its lease table is missing. List works; every other call fails
	// with store.ErrReadOnly.
	ReadOnly bool

	// WatchPoll is how often, while a Watch is active, this process looks
	// for acquisitions and releases committed by other processes, so that
	// those reach its watchers too. An idle look is one tiny query. Zero
	// means DefaultWatchPoll; a negative value turns it off, and Watch then
	// delivers only this process's own changes.
	WatchPoll time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := store.ValidateName("table", o.Table); err != nil {
		return o, err
	}
	switch {
	case o.BusyTimeout == 0:
		o.BusyTimeout = DefaultBusyTimeout
	case o.BusyTimeout < time.Millisecond:
		return o, fmt.Errorf("busy timeout %v is shorter than 1ms: %w", o.BusyTimeout, store.ErrInvalidDuration)
	}
	switch {
	case o.WatchPoll == 0:
		o.WatchPoll = DefaultWatchPoll
	case o.WatchPoll > 0 && o.WatchPoll < time.Millisecond:
		// Shorter would spin a core for nothing.
		return o, fmt.Errorf("watch poll %v is shorter than 1ms: %w", o.WatchPoll, store.ErrInvalidDuration)
	}
	return o, nil
}

// Store is a lease store in one SQLite file. It is safe for concurrent use,
// and several Stores — in one process or several — may share a file.
type Store struct {
	db    *sql.DB
	path  string // absolute, cleaned; named in every error
	table string
	q     queries
	hub   *hub
	gate  gate // shared by every Store of this file in the process
	busy  time.Duration
	poll  time.Duration // < 0: this Store's watches start no poller
	// readOnly: see Options.ReadOnly.
	readOnly bool
	// book is what this Store knows of its sessions (session.go).
	book sessionbook.Book
	// legacy says a read-only Store's table predates sessions: it lists
	// with old (the queries of such a table) until the table is migrated.
	legacy atomic.Bool
	old    queries

	closeOnce sync.Once
	closeMu   sync.Mutex    // orders Close against Watch's watchers.Add
	closing   chan struct{} // closed by Close; ends every Watch
	watchers  sync.WaitGroup
	closeErr  error
}

// Compile-time checks of the capabilities the engine and the CLI look for.
var (
	_ store.Store    = (*Store)(nil)
	_ store.Watcher  = (*Store)(nil)
	_ store.Migrator = (*Store)(nil)
	_ store.Revoker  = (*Store)(nil)
)

// Open opens (creating if needed) the SQLite file at path, and the lease
// table in it. A missing parent directory is created with mode 0700, since
// the file says who runs what. With Options.ReadOnly nothing is created:
// the file and its table must exist. The returned Store must be closed.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("sqlite %s: is a directory, not a database file", abs)
	case opts.ReadOnly && errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("sqlite: no store at %s: nothing has run against it (did you mean another path?): %w", abs, store.ErrNotFound)
	case opts.ReadOnly && err != nil:
		return nil, fmt.Errorf("sqlite %s: %w", abs, err)
	case !opts.ReadOnly:
		if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
			return nil, fmt.Errorf("sqlite %s: create parent directory: %w", abs, err)
		}
	}

	canon := canonical(abs)
	db, err := sql.Open("sqlite", dsn(abs, opts.BusyTimeout, opts.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", abs, err)
	}
	s := &Store{
		db:       db,
		path:     abs,
		table:    opts.Table,
		q:        buildQueries(opts.Table, true),
		old:      buildQueries(opts.Table, false),
		hub:      hubFor(canon, opts.Table),
		gate:     gateFor(canon),
		busy:     opts.BusyTimeout,
		poll:     opts.WatchPoll,
		readOnly: opts.ReadOnly,
		closing:  make(chan struct{}),
	}
	check := s.checkJournal
	if opts.ReadOnly {
		check = s.checkTable
	}
	if err := whileBusy(ctx, opts.BusyTimeout, check); err != nil {
		db.Close()
		return nil, err
	}
	if opts.ReadOnly {
		return s, nil
	}
	if err := whileBusy(ctx, opts.BusyTimeout, s.Migrate); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// whileBusy runs step again while it fails with SQLITE_BUSY, for up to
// busy. Processes that open a fresh file together race to switch it to WAL
// and create the table, and SQLite may answer the loser SQLITE_BUSY at
// once, without waiting for the busy timeout (it does not call its busy
// handler where waiting could deadlock).
func whileBusy(ctx context.Context, busy time.Duration, step func(context.Context) error) error {
	deadline := time.Now().Add(busy)
	wait := time.Millisecond
	for {
		err := step(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// isBusy reports whether err is SQLITE_BUSY (or one of its extended codes).
func isBusy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}

// OpenURL opens the store a URL names; see the package documentation for
// the accepted forms.
func OpenURL(ctx context.Context, rawURL string) (*Store, error) {
	path, opts, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return Open(ctx, path, opts)
}

// ParseURL splits a sqlite: URL into a file path and Options.
func ParseURL(rawURL string) (path string, opts Options, err error) {
	bad := func(why string) (string, Options, error) {
		return "", Options{}, fmt.Errorf("sqlite URL %s: %s: %w", store.RedactURL(rawURL), why, store.ErrInvalidURL)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad("does not parse")
	}
	if u.Scheme != "sqlite" {
		return bad(`scheme must be "sqlite"`)
	}
	if u.User != nil || u.Host != "" {
		return bad("a host is not allowed; write sqlite:relative/path or sqlite:///absolute/path")
	}
	if u.Fragment != "" {
		return bad("a fragment is not allowed; write '#' in a path as %23")
	}
	switch {
	case u.Opaque != "": // sqlite:relative/path
		if path, err = url.PathUnescape(u.Opaque); err != nil {
			return bad("bad percent-encoding in the path")
		}
	default: // sqlite:/abs or sqlite:///abs; url.Parse already unescaped Path
		path = u.Path
	}
	if path == "" {
		return bad("no file path")
	}
	for key, vals := range u.Query() {
		if len(vals) != 1 {
			return bad(fmt.Sprintf("parameter %q given %d times", key, len(vals)))
		}
		switch v := vals[0]; key {
		case "table":
			opts.Table = v
		case "busy_timeout":
			d, perr := time.ParseDuration(v)
			if perr != nil || d <= 0 {
				return bad(fmt.Sprintf("busy_timeout %q is not a positive duration such as 5s", v))
			}
			opts.BusyTimeout = d
		case "watch_poll":
			if v == "off" {
				opts.WatchPoll = -1
				break
			}
			d, perr := time.ParseDuration(v)
			if perr != nil || d <= 0 {
				return bad(fmt.Sprintf("watch_poll %q is neither off nor a positive duration such as 50ms", v))
			}
			opts.WatchPoll = d
		default:
			return bad(fmt.Sprintf("unknown parameter %q (known: table, busy_timeout, watch_poll)", key))
		}
	}
	if _, err := opts.withDefaults(); err != nil {
		return "", Options{}, fmt.Errorf("sqlite URL %s: %w", store.RedactURL(rawURL), err)
	}
	return path, opts, nil
}

// dsn builds the driver's connection string. It is a file: URI so that any
// byte of the path survives (the driver cuts a plain name at its first '?').
// The parameters are applied by the driver to every pooled connection:
// busy_timeout first, so that switching to WAL waits for a lock instead of
// failing; and _txlock=immediate makes every transaction take the write lock
// at BEGIN, so two processes queue instead of deadlocking on a lock upgrade.
func dsn(absPath string, busy time.Duration, readOnly bool) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(filepath.ToSlash(absPath))
	if !strings.HasPrefix(esc, "/") { // a Windows drive path: file:/C:/…
		esc = "/" + esc
	}
	if readOnly {
		// mode=ro: SQLite itself refuses to create the file or write to it.
		return fmt.Sprintf("file:%s?mode=ro&_pragma=busy_timeout(%d)", esc, busy.Milliseconds())
	}
	return fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_txlock=immediate",
		esc, busy.Milliseconds())
}

// canonical resolves symbolic links in the directory part of a path, so that
// two Stores reaching one file by different names share their events.
func canonical(abs string) string {
	if p, err := filepath.EvalSymlinks(abs); err == nil {
		return p
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(dir, filepath.Base(abs))
	}
	return abs
}

// checkJournal makes the first connection, which also reads the file's
// header, and confirms the switch to WAL: without it, readers would block
// writers and the busy timeout would be spent on every List.
func (s *Store) checkJournal(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return s.fail("open", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return s.fail("open", fmt.Errorf("journal mode is %q, not WAL (SQLite needs a local file system)", mode))
	}
	return nil
}

// checkTable confirms, for a read-only Store, that its table exists, and
// reads a table made before sessions as it is: each record by its own
// expiry.
func (s *Store) checkTable(ctx context.Context) error {
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.exists, s.table).Scan(&n); err != nil {
		return s.fail("open", err)
	}
	if n == 0 {
		return fmt.Errorf("sqlite %s: no lease table %s in this file: nothing has run against it (did you mean another ?table=?): %w",
			s.path, s.table, store.ErrNotFound)
	}
	have, err := s.columnsOf(ctx, s.db)
	if err != nil {
		return s.fail("open", err)
	}
	if !have["session"] {
		s.legacy.Store(true)
	}
	return nil
}

// listQueries returns the queries List uses: a read-only Store on a table
// made before sessions looks again each time, so it follows the table
// when another Store migrates it.
func (s *Store) listQueries(ctx context.Context) (*queries, error) {
	if s.legacy.Load() {
		have, err := s.columnsOf(ctx, s.db)
		if err != nil || !have["session"] {
			return &s.old, err
		}
		s.legacy.Store(false)
	}
	return &s.q, nil
}

// Migrate creates the lease table and its session table if they do not
// exist, and adds the columns and indexes of change numbering (see Watch)
// and of sessions (session.go) to a table made by an older version. It is one transaction under the write lock, so processes
// opening one file together do not both add a column.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.writable("migrate table " + s.table); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return s.fail("migrate table "+s.table, err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer done()
	if _, err := tx.ExecContext(ctx, s.q.create); err != nil {
		return err
	}
	have, err := s.columnsOf(ctx, tx)
	if err != nil {
		return err
	}
	for _, col := range []string{"change_seq", "change_origin", "session"} {
		if have[col] {
			continue
		}
		// Old rows get 0: older than any change a poller will look for.
		if _, err := tx.ExecContext(ctx, "ALTER TABLE "+s.table+" ADD COLUMN "+col+" INTEGER NOT NULL DEFAULT 0"); err != nil {
			return fmt.Errorf("add column %s: %w", col, err)
		}
	}
	for _, q := range []string{s.q.index, s.q.createSessions, s.q.sessionIndex, s.q.revokedTrigger} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// columnsOf returns the names of the lease table's columns.
func (s *Store) columnsOf(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, s.q.columns, s.table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		have[name] = true
	}
	return have, rows.Err()
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close ends every Watch and closes the database. Calls after Close fail with
// store.ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeMu.Lock()
		close(s.closing)
		s.closeMu.Unlock()
		s.watchers.Wait()
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// writable fails, as operation op, once the store is closed, and always
// for a read-only Store.
func (s *Store) writable(op string) error {
	switch {
	case s.isClosed():
		return s.fail(op, store.ErrClosed)
	case s.readOnly:
		return fmt.Errorf("sqlite %s: %s: opened read-only: %w", s.path, op, store.ErrReadOnly)
	}
	return nil
}

// fail wraps an error of operation op with the file's path, reporting a
// closed store as store.ErrClosed rather than as a driver message.
func (s *Store) fail(op string, err error) error {
	if s.isClosed() {
		return fmt.Errorf("sqlite %s: %s: %w", s.path, op, store.ErrClosed)
	}
	return fmt.Errorf("sqlite %s: %s: %w", s.path, op, denied(err))
}

// denied marks as store.ErrDenied the SQLite errors that mean the file
// cannot be used as it is: SQLITE_PERM, SQLITE_READONLY (no write
// permission, a read-only mount, the file moved), SQLITE_CANTOPEN and
// SQLITE_AUTH, with their extended codes.
func denied(err error) error {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case 3, 8, 14, 23:
			return store.Denied(err)
		}
	}
	return err
}

// Drop deletes the lease table and the session table beside it, for a
// table made for a while: `tenure verify`'s scratch table in a file of the
// user's, a test's. Every lease in it is gone, so no replica may be using
// it. The Store is only good for Close afterwards.
func (s *Store) Drop(ctx context.Context) error {
	if err := s.writable("drop"); err != nil {
		return err
	}
	tx, done, err := s.beginWrite(ctx)
	if err != nil {
		return s.fail("drop table "+s.table, err)
	}
	defer done()
	for _, q := range []string{`DROP TABLE IF EXISTS ` + s.table, `DROP TABLE IF EXISTS ` + sessionTable(s.table)} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return s.fail("drop table "+s.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.fail("drop table "+s.table, err)
	}
	return nil
}
