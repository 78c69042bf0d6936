package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// openTemp opens a Store on a fresh file, closed when the test ends.
func openTemp(t testing.TB, opts Options) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "leases.db"), opts)
}

func openAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func acquire(t testing.TB, s *Store, key, owner string, ttl, grace time.Duration) store.AcquireResult {
	t.Helper()
	res, err := s.Acquire(context.Background(), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: grace, Running: true})
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, owner, err)
	}
	return res
}

func mustAcquire(t testing.TB, s *Store, key, owner string) int64 {
	t.Helper()
	return testenv.MustAcquire(t, s, key, owner, time.Minute, time.Second)
}

// The Renew documentation promises it.
func TestTheLastRunningStateOfARepeatedTermIsRecorded(t *testing.T) {
	testenv.CheckTheLastRunningStateOfARepeatedTermWins(t, openTemp(t, Options{}))
}

// lockDatabase holds SQLite's write lock (BEGIN IMMEDIATE) until unlock.
func lockDatabase(t testing.TB, s *Store) (unlock func()) {
	t.Helper()
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A write makes sure the lock is really held, whatever the txlock.
	if _, err := tx.Exec("UPDATE " + s.table + " SET updated_at = updated_at WHERE 0"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() { once.Do(func() { tx.Rollback() }) }
}

func TestDatabaseRunsInWALMode(t *testing.T) {
	s := openTemp(t, Options{})
	// Ask several pooled connections: every one must have WAL and the timeout.
	ctx := context.Background()
	var conns []interface{ Close() error }
	for i := 0; i < 3; i++ {
		c, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var mode string
		var busy int
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || busy != 5000 {
			t.Fatalf("connection %d: journal_mode %q, busy_timeout %d; want wal, 5000", i, mode, busy)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

func TestTableNameIsValidated(t *testing.T) {
	dir := t.TempDir()
	testenv.CheckBadNamesAreRefused(t, func(name string) error {
		s, err := Open(context.Background(), filepath.Join(dir, "x.db"), Options{Table: name})
		if err == nil {
			s.Close()
		}
		return err
	})
	s := openAt(t, filepath.Join(dir, "x.db"), Options{Table: "Custom_Leases2"})
	mustAcquire(t, s, "job", "a")
	var n int
	if err := s.db.QueryRow("SELECT count(*) FROM Custom_Leases2").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in the custom table: %d, %v", n, err)
	}
}

func TestBadPathsGiveErrorsNamingThePath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain-file")
	if err := os.WriteFile(file, []byte(strings.Repeat("not a database; ", 20)), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"a directory":             dir,
		"a path under a file":     filepath.Join(file, "leases.db"),
		"a file that is not a db": file,
	} {
		_, err := Open(context.Background(), path, Options{})
		if err == nil {
			t.Errorf("%s: Open(%q) succeeded", name, path)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %q does not name %q", name, err, path)
		}
	}
	if _, err := Open(context.Background(), "", Options{}); err == nil {
		t.Error("Open with an empty path succeeded")
	}
}

func TestOpenCreatesAPrivateParentDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "tenure")
	openAt(t, filepath.Join(dir, "what?#%.db"), Options{})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("parent directory mode %v, want 0700", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "what?#%.db")); err != nil {
		t.Fatalf("the database file was not created under its exact name: %v", err)
	}
}

func TestReadOnlyNeverCreatesTheFileOrTheTableAndRefusesWrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "typo", "leases.db")
	testenv.CheckReadOnlyOpenCreatesNothing(t,
		func(ctx context.Context) (store.Store, error) { return Open(ctx, path, Options{ReadOnly: true}) },
		func() store.Store {
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("read-only opens left %v behind", entries)
			}
			return openAt(t, path, Options{})
		})
	// A file that holds no lease table is no store either.
	_, err := Open(t.Context(), path, Options{ReadOnly: true, Table: "other"})
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "no lease table other") {
		t.Errorf("read-only open of a missing table: %v", err)
	}
}

func TestTwoHandlesOnOneFileNeverBothWin(t *testing.T) {
	t.Run("same process", func(t *testing.T) { raceTwoHandles(t, false) })
	// With private gates the two handles meet only at SQLite's write lock,
	// as two processes do.
	t.Run("as two processes", func(t *testing.T) { raceTwoHandles(t, true) })
}

func raceTwoHandles(t *testing.T, separateGates bool) {
	path := filepath.Join(t.TempDir(), "leases.db")
	handles := []*Store{openAt(t, path, Options{}), openAt(t, path, Options{})}
	if separateGates {
		handles[1].gate = make(gate, 1)
	}
	for round := 0; round < 25; round++ {
		key := "key-" + string(rune('a'+round))
		results := make([]store.AcquireResult, len(handles))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, h := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := h.Acquire(context.Background(), store.AcquireRequest{
					Key: key, Owner: "owner-" + string(rune('0'+i)), TTL: time.Minute, Grace: time.Second})
				if err != nil {
					t.Errorf("handle %d: %v", i, err)
				}
				results[i] = res
			}()
		}
		close(start)
		wg.Wait()
		if results[0].Acquired == results[1].Acquired {
			t.Fatalf("round %d: acquired = %v and %v, want exactly one", round, results[0].Acquired, results[1].Acquired)
		}
		win, lose := results[0], results[1]
		if lose.Acquired {
			win, lose = lose, win
		}
		if lose.Holder.Epoch != win.Epoch || !lose.Holder.Live {
			t.Fatalf("round %d: loser saw %+v, winner has epoch %d", round, lose.Holder, win.Epoch)
		}
	}
}

func TestWaitingBehindAnotherWriterInThisProcessEndsWithTheContext(t *testing.T) {
	s := openTemp(t, Options{})
	e := mustAcquire(t, s, "job", "a")
	if err := s.gate.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.gate.leave()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: e}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Renew queued behind a writer that never finishes: %v, want DeadlineExceeded", err)
	}
}

// Without _txlock=immediate a transaction would read first and upgrade to
// the write lock later, where two processes can deadlock; BEGIN IMMEDIATE
// takes the lock before anything is read.
func TestTransactionsTakeTheWriteLockAtBegin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	a, b := openAt(t, path, Options{}), openAt(t, path, Options{})
	tx, err := a.db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := b.db.ExecContext(ctx, "UPDATE "+b.table+" SET updated_at = 0 WHERE 0")
		return err
	}
	if err := write(); err == nil {
		t.Fatal("another connection wrote while a transaction that has run nothing yet was open")
	}
	tx.Rollback()
	if err := write(); err != nil {
		t.Fatalf("write after the transaction ended: %v", err)
	}
}
