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
	res := acquire(t, s, key, owner, time.Minute, time.Second)
	if !res.Acquired {
		t.Fatalf("Acquire(%q, %q) refused; holder %+v", key, owner, res.Holder)
	}
	return res.Epoch
}

func TestRefusedAcquireReportsTheHolder(t *testing.T) {
	s := openTemp(t, Options{})
	if e := mustAcquire(t, s, "job", "a"); e != 1 {
		t.Fatalf("first epoch = %d, want 1", e)
	}
	res := acquire(t, s, "job", "b", time.Minute, time.Second)
	if res.Acquired {
		t.Fatal("b acquired a key a holds")
	}
	h := res.Holder
	if h.Key != "job" || h.Owner != "a" || h.Epoch != 1 || !h.Live || h.Released || !h.Running {
		t.Fatalf("holder = %+v", h)
	}
	if h.TimeLeft <= 50*time.Second || h.TimeLeft > time.Minute {
		t.Fatalf("holder time left = %v, want about 1m", h.TimeLeft)
	}
}

func TestReleasedKeyCanBeTakenAtOnceWithAHigherEpoch(t *testing.T) {
	s := openTemp(t, Options{})
	e1 := mustAcquire(t, s, "job", "a")
	if err := s.Release(context.Background(), "a", []store.Term{{Key: "job", Epoch: e1}}); err != nil {
		t.Fatal(err)
	}
	ls, err := s.List(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || !ls[0].Released || ls[0].Live || ls[0].Owner != "a" || ls[0].Epoch != e1 || ls[0].TimeLeft > 0 {
		t.Fatalf("after release: %+v", ls)
	}
	res := acquire(t, s, "job", "b", time.Minute, time.Hour)
	if !res.Acquired || res.Epoch <= e1 {
		t.Fatalf("after release: %+v, want acquired with epoch > %d", res, e1)
	}
}

func TestExpiredKeyIsBlockedUntilGraceHasPassed(t *testing.T) {
	s := openTemp(t, Options{})
	acquire(t, s, "job", "a", 50*time.Millisecond, 0)
	time.Sleep(80 * time.Millisecond)
	res := acquire(t, s, "job", "b", time.Minute, time.Second)
	if res.Acquired {
		t.Fatal("b acquired inside a's grace")
	}
	if res.Holder.Live || res.Holder.Owner != "a" || res.Holder.TimeLeft >= 0 {
		t.Fatalf("holder = %+v, want a's expired term", res.Holder)
	}
	res = acquire(t, s, "job", "b", time.Minute, 20*time.Millisecond)
	if !res.Acquired || res.Epoch != 2 {
		t.Fatalf("after grace: %+v, want acquired at epoch 2", res)
	}
}

func TestOwnerReacquiringItsLiveKeyStartsANewTerm(t *testing.T) {
	s := openTemp(t, Options{})
	e1 := mustAcquire(t, s, "job", "a")
	e2 := mustAcquire(t, s, "job", "a")
	if e2 <= e1 {
		t.Fatalf("epochs %d then %d", e1, e2)
	}
	ok, err := s.Renew(context.Background(), "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: e1}, {Key: "job", Epoch: e2}})
	if err != nil {
		t.Fatal(err)
	}
	if ok[0] || !ok[1] {
		t.Fatalf("renew old and new term = %v, want [false true]", ok)
	}
}

func TestRenewAnswersEveryItemInInputOrder(t *testing.T) {
	s := openTemp(t, Options{})
	ctx := context.Background()
	ea := mustAcquire(t, s, "a", "me")
	eb := mustAcquire(t, s, "b", "me")
	mustAcquire(t, s, "peer", "other")
	er := mustAcquire(t, s, "released", "me")
	if err := s.Release(ctx, "me", []store.Term{{Key: "released", Epoch: er}}); err != nil {
		t.Fatal(err)
	}
	items := []store.RenewItem{
		{Key: "b", Epoch: eb, Running: false},
		{Key: "missing", Epoch: 1},
		{Key: "a", Epoch: ea + 1}, // a newer epoch than the store has
		{Key: "peer", Epoch: 1},
		{Key: "released", Epoch: er},
		{Key: "a", Epoch: ea, Running: false},
		{Key: "b", Epoch: eb, Running: true}, // duplicate: same answer, last state wins
		{Key: "a", Epoch: ea, Running: true},
	}
	got, err := s.Renew(ctx, "me", 30*time.Second, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, false, false, true, true, true}
	if len(got) != len(want) {
		t.Fatalf("got %d answers for %d items", len(got), len(items))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Renew = %v, want %v", got, want)
		}
	}
	ls, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		switch l.Key {
		case "a", "b":
			if !l.Running || l.TimeLeft > 30*time.Second || l.TimeLeft < 25*time.Second {
				t.Errorf("%s after renew: %+v, want running with about 30s left", l.Key, l)
			}
		case "peer":
			if l.Owner != "other" || l.TimeLeft < 50*time.Second {
				t.Errorf("peer's lease changed: %+v", l)
			}
		}
	}
}

func TestExpiredTermCannotBeRenewed(t *testing.T) {
	s := openTemp(t, Options{})
	res := acquire(t, s, "job", "a", 20*time.Millisecond, time.Hour)
	time.Sleep(40 * time.Millisecond)
	ok, err := s.Renew(context.Background(), "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: res.Epoch}})
	if err != nil {
		t.Fatal(err)
	}
	if ok[0] {
		t.Fatal("an expired term was renewed")
	}
}

func TestReleasingAnOldTermChangesNothing(t *testing.T) {
	s := openTemp(t, Options{})
	ctx := context.Background()
	e1 := mustAcquire(t, s, "job", "a")
	e2 := mustAcquire(t, s, "job", "a")
	if err := s.Release(ctx, "a", []store.Term{{Key: "job", Epoch: e1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "b", []store.Term{{Key: "job", Epoch: e2}}); err != nil {
		t.Fatal(err)
	}
	ls, _ := s.List(ctx, "job")
	if len(ls) != 1 || !ls[0].Live || ls[0].Epoch != e2 {
		t.Fatalf("after stale releases: %+v", ls)
	}
}

func TestListMatchesPrefixesByteForByte(t *testing.T) {
	s := openTemp(t, Options{})
	keys := []string{"a_b", "a%c", "aXb", "A_b", "a_", "a", "a_b ", "é", "éa", "e", "a\u00ff", "b"}
	for _, k := range keys {
		mustAcquire(t, s, k, "o")
	}
	cases := map[string][]string{
		"a_":      {"a_", "a_b", "a_b "},
		"a%":      {"a%c"},
		"A":       {"A_b"},
		"é":       {"é", "éa"},
		"a\u00ff": {"a\u00ff"},
		"zz":      nil,
		"":        {"A_b", "a", "a%c", "aXb", "a_", "a_b", "a_b ", "a\u00ff", "b", "e", "é", "éa"},
	}
	for prefix, want := range cases {
		ls, err := s.List(context.Background(), prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range ls {
			got = append(got, l.Key)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestRevokeFencesTheHolderAndKeepsPeersOutUntilItsExpiry(t *testing.T) {
	s := openTemp(t, Options{})
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	e1 := acquire(t, s, "job", "a", ttl, 0).Epoch
	revoked, err := s.Revoke(ctx, "job")
	if err != nil || !revoked {
		t.Fatalf("Revoke = %v, %v", revoked, err)
	}
	ok, err := s.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: e1}})
	if err != nil || ok[0] {
		t.Fatalf("holder's renewal after revoke = %v, %v; want refused", ok, err)
	}
	// Even with no grace, a peer waits for the revoked term's own expiry:
	// the holder may not have heard of the revocation yet.
	res := acquire(t, s, "job", "b", time.Minute, 0)
	if res.Acquired || res.Holder.Owner != "" || res.Holder.Epoch != e1+1 || res.Holder.Live || res.Holder.TimeLeft <= 0 {
		t.Fatalf("peer right after revoke: %+v; want blocked by the unowned, unexpired epoch %d", res, e1+1)
	}
	if again, err := s.Revoke(ctx, "job"); err != nil || again {
		t.Fatalf("second Revoke = %v, %v; want false: no live term left", again, err)
	}
	time.Sleep(ttl + 20*time.Millisecond)
	if res := acquire(t, s, "job", "b", time.Minute, 0); !res.Acquired || res.Epoch != e1+2 {
		t.Fatalf("peer after the expiry: %+v, want epoch %d", res, e1+2)
	}
	if revoked, err := s.Revoke(ctx, "nothing-here"); err != nil || revoked {
		t.Fatalf("Revoke of a missing key = %v, %v", revoked, err)
	}
}

func TestCancelledContextIsNeverARenewal(t *testing.T) {
	s := openTemp(t, Options{})
	e := mustAcquire(t, s, "job", "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := s.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: e}})
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Renew with a cancelled ctx = %v, %v; want context.Canceled", ok, err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "a", TTL: time.Second}); err == nil {
		t.Fatal("Acquire with a cancelled ctx succeeded")
	}
}

// A writer in another connection holds the database lock; a call waiting
// behind it must give up when its context does, not after the busy timeout.
func TestWaitForTheWriteLockEndsWithTheContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s := openAt(t, path, Options{BusyTimeout: 10 * time.Second})
	other := openAt(t, path, Options{})
	e := mustAcquire(t, s, "job", "a")

	unlock := lockDatabase(t, other)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: e}})
	if err == nil {
		t.Fatal("renewed while another connection held the write lock")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Renew returned after %v; the context ended after 150ms", took)
	}
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
	for _, bad := range []string{"leases; DROP TABLE x", "1leases", "my-leases", `"q"`, strings.Repeat("x", 64)} {
		_, err := Open(context.Background(), filepath.Join(dir, "x.db"), Options{Table: bad})
		if !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("Open with table %q: %v, want ErrInvalidName", bad, err)
		}
	}
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

func TestClosedStoreReportsErrClosed(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	_, err1 := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	_, err2 := s.Renew(ctx, "o", time.Second, []store.RenewItem{{Key: "k", Epoch: 1}})
	err3 := s.Release(ctx, "o", []store.Term{{Key: "k", Epoch: 1}})
	_, err4 := s.List(ctx, "")
	_, err5 := s.Watch(ctx, "")
	for i, err := range []error{err1, err2, err3, err4, err5} {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("call %d after Close: %v, want ErrClosed", i+1, err)
		}
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
