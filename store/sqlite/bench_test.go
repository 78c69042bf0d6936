package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/sqlite/

var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return openTemp(b, Options{}) },
	Fill: fillHeld,
	Renewals: map[string]storetest.Renewal{
		// The reference design: one UPDATE per key, here at least inside one
		// transaction so that it pays for one commit, not n.
		"naive": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			query := `UPDATE ` + s.table + ` SET expires_at = ` + nowUS + ` + ?, running = ?, updated_at = ` + nowUS + `
WHERE key = ? AND epoch = ? AND owner = ? AND released = 0 AND expires_at > ` + nowUS
			ttl := time.Hour.Microseconds()
			return func(ctx context.Context) error {
				tx, err := s.db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback() //nolint:errcheck // a no-op after Commit
				for _, it := range items {
					res, err := tx.ExecContext(ctx, query, ttl, boolInt(it.Running), it.Key, it.Epoch, owner)
					if err != nil {
						return err
					}
					if k, _ := res.RowsAffected(); k != 1 {
						return fmt.Errorf("%s was not renewed", it.Key)
					}
				}
				return tx.Commit()
			}
		},
		// The batched statement alone, its JSON argument built outside the
		// timer and no results mapped back: the floor for "store".
		"raw-batched-sql": func(b *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			triples := make([][3]any, len(items))
			for i, it := range items {
				triples[i] = [3]any{it.Key, it.Epoch, 1}
			}
			arg, err := json.Marshal(triples)
			if err != nil {
				b.Fatal(err)
			}
			t := s.table
			query := `UPDATE ` + t + ` SET expires_at = ` + nowUS + ` + ?2, running = j.value ->> 2, updated_at = ` + nowUS + `
FROM json_each(?3) AS j
WHERE ` + t + `.key = j.value ->> 0 AND ` + t + `.epoch = j.value ->> 1 AND ` + t + `.owner = ?1
	AND ` + t + `.released = 0 AND ` + t + `.expires_at > ` + nowUS
			ttl := time.Hour.Microseconds()
			return func(ctx context.Context) error {
				res, err := s.db.ExecContext(ctx, query, owner, ttl, string(arg))
				if err != nil {
					return err
				}
				if k, _ := res.RowsAffected(); k != int64(len(items)) {
					return fmt.Errorf("renewed %d of %d", k, len(items))
				}
				return nil
			}
		},
	},
}

// fillHeld inserts n live terms of owner (epoch 1) in one transaction — far
// faster than n acquisitions, each of which commits.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO `+s.table+
		` (key, owner, epoch, expires_at, released, running, updated_at) VALUES (?, ?, 1, `+nowUS+` + 3600000000, 0, 1, `+nowUS+`)`)
	if err != nil {
		b.Fatal(err)
	}
	items := make([]store.RenewItem, n)
	for i := range items {
		items[i] = store.RenewItem{Key: fmt.Sprintf("bench/%06d", i+1), Epoch: 1, Running: true}
		if _, err := stmt.ExecContext(ctx, items[i].Key, owner); err != nil {
			b.Fatal(err)
		}
	}
	stmt.Close()
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return items
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }

// BenchmarkRenewOnASession is a process's steady renewal: its terms already
// on its session (the first renewal, timed apart, puts Fill's records
// there), against the statement that renewed each record before sessions.
//
//	go test -run '^$' -bench RenewOnASession -benchtime 20x ./store/sqlite/
func BenchmarkRenewOnASession(b *testing.B) {
	sessiontest.BenchRenewOnASession(b, sessiontest.BenchHarness{
		Open: func(b *testing.B, n int) (store.Store, []store.RenewItem) {
			s := openTemp(b, Options{})
			return s, fillHeld(b, s, storetest.BenchOwner, n)
		},
		OffSessions: func(b *testing.B, st store.Store) {
			s := st.(*Store)
			if _, err := s.db.Exec(`UPDATE ` + s.table + ` SET session = 0, expires_at = ` + nowUS + ` + 3600000000`); err != nil {
				b.Fatal(err)
			}
			s.book = sessionbook.Book{}
		},
		More: []sessiontest.BenchStep{{Name: "per-record statement", Run: func(b *testing.B, s store.Store, items []store.RenewItem) {
			round := bench.Renewals["raw-batched-sql"](b, s, storetest.BenchOwner, items)
			for b.Loop() {
				if err := round(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		}}},
	})
}
