package mysql

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure/internal/storetesting"
	"github.com/tenure-dev/tenure/internal/testenv"
	"github.com/tenure-dev/tenure/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func randomTable() string { return storetesting.UniqueName("tenure_test_") }

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
	var dropFn func(context.Context, *Store) error
	if drop {
		dropFn = func(ctx context.Context, s *Store) error { return dropTable(ctx, s, url) }
	}
	return storetesting.Open(t, func(ctx context.Context) (*Store, error) {
		return Open(ctx, url, Options{Table: table})
	}, dropFn)
}

// dropTable drops s's table, through a store of its own when the test
// closed s and its pool with it.
func dropTable(ctx context.Context, s *Store, url string) error {
	if s.closed.Load() && s.ownsDB {
		var err error
		if s, err = Open(ctx, url, Options{Table: s.table, NoAutoMigrate: true}); err != nil {
			return err
		}
		defer s.Close()
	}
	_, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+s.table+"`")
	return err
}

// openURL opens and closes a store on rawURL, for the tests of Open's
// errors.
func openURL(ctx context.Context, rawURL string) error {
	s, err := Open(ctx, rawURL, Options{})
	if err == nil {
		s.Close()
	}
	return err
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
