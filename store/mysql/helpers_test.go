package mysql

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tables opens stores on tables of the test server.
var tables = testenv.Tables[*Store]{
	Server: testenv.MySQL,
	Open: func(ctx context.Context, url, table string, migrate bool) (*Store, error) {
		return Open(ctx, url, Options{Table: table, NoAutoMigrate: !migrate})
	},
	Drop: dropTable,
}

func dropTable(ctx context.Context, s *Store) error { return s.Drop(ctx) }

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
	// A peer's writing statement locks the record's session first (if it
	// is on one), then the record.
	var one int
	_, err = tx.ExecContext(ctx, "SELECT 1 FROM "+sessionTable(s.table)+" WHERE id = (SELECT session FROM `"+s.table+"` WHERE lease_key = ?) FOR UPDATE", []byte(key))
	if err == nil {
		err = tx.QueryRowContext(ctx, "SELECT 1 FROM `"+s.table+"` WHERE lease_key = ? FOR UPDATE", []byte(key)).Scan(&one)
	}
	if err != nil {
		_ = tx.Rollback()
		t.Fatalf("lock %q: %v", key, err)
	}
	return func() { _ = tx.Rollback() }
}
