package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure/internal/testenv"
	"github.com/tenure-dev/tenure/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// randomTable returns a table name no other test uses.
func randomTable() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "tenure_test_" + hex.EncodeToString(b)
}

// newTestStore opens a store on a fresh table of the test server; the table
// is dropped and the store closed when the test ends.
func newTestStore(t testing.TB) *Store {
	t.Helper()
	return openTable(t, randomTable(), true)
}

// openTable opens a store on table; drop says whether this store's cleanup
// drops the table (only one store per table should).
func openTable(t testing.TB, table string, drop bool) *Store {
	t.Helper()
	url := testenv.MySQL.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, url, Options{Table: table})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if drop {
			dropTable(t, s.db, table)
		}
		s.Close()
	})
	return s
}

func dropTable(t testing.TB, db *sql.DB, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+table+"`"); err != nil {
		t.Errorf("drop table %s: %v", table, err)
	}
}

// lockKey holds a row lock on key's record from another transaction, as a
// peer's statement would, until unlock is called.
func lockKey(t *testing.T, st store.Store, key string) (unlock func()) {
	t.Helper()
	s := st.(*Store)
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	var one int
	err = tx.QueryRowContext(ctx, "SELECT 1 FROM `"+s.table+"` WHERE lease_key = ? FOR UPDATE", []byte(key)).Scan(&one)
	if err != nil {
		_ = tx.Rollback()
		t.Fatalf("lock %q: %v", key, err)
	}
	return func() { _ = tx.Rollback() }
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, s store.Store, key, owner string, ttl, grace time.Duration) int64 {
	t.Helper()
	res, err := s.Acquire(ctxT(t), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: grace, Running: true})
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, owner, err)
	}
	if !res.Acquired {
		t.Fatalf("Acquire(%q, %q): refused, held by %+v", key, owner, res.Holder)
	}
	return res.Epoch
}

func mustList(t testing.TB, s store.Store, prefix string) []store.Lease {
	t.Helper()
	ls, err := s.List(ctxT(t), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return ls
}

func leaseOf(t testing.TB, s store.Store, key string) store.Lease {
	t.Helper()
	for _, l := range mustList(t, s, key) {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no lease for %q", key)
	return store.Lease{}
}
