package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/mysql/

var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return tables.New(b) },
	Fill: fillHeld,
	Renewals: map[string]storetest.Renewal{
		// The reference design: one autocommit UPDATE per key, sequential
		// round trips, with the same conditions as a batched renewal.
		"naive": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			q := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS).Replace(`UPDATE {t}
				SET expires_at = {now} + ?, running = ?, updated_at = {now}
				WHERE lease_key = ? AND epoch = ? AND owner = ? AND NOT released AND expires_at > {now}`)
			ttl := time.Hour.Microseconds()
			return func(ctx context.Context) error {
				for _, it := range items {
					r, err := s.db.ExecContext(ctx, q, ttl, it.Running, it.Key, it.Epoch, owner)
					if err != nil {
						return err
					}
					if n, _ := r.RowsAffected(); n != 1 {
						return fmt.Errorf("%s was not renewed", it.Key)
					}
				}
				return nil
			}
		},
		// The bare batched statement, written by hand: keys as JSON text, a
		// plain join, no renew id, the document built once. The gap to
		// "store" is what Store.Renew adds.
		"raw-json-table": func(b *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			q := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS).Replace(`UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
					k VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
					e BIGINT PATH '$[1]', r TINYINT PATH '$[2]')) AS j
				JOIN {t} AS l ON l.lease_key = j.k AND l.epoch = j.e
				SET l.expires_at = {now} + ?, l.running = j.r, l.updated_at = {now}
				WHERE l.owner = ? AND NOT l.released AND l.expires_at > {now}`)
			rows := make([][3]any, len(items))
			for i, it := range items {
				rows[i] = [3]any{it.Key, it.Epoch, 1}
			}
			doc, err := json.Marshal(rows)
			if err != nil {
				b.Fatal(err)
			}
			ttl := time.Hour.Microseconds()
			return func(ctx context.Context) error {
				return execAll(ctx, s, len(items), q, string(doc), ttl, owner)
			}
		},
		// The other way to build a derived table: SELECT … UNION ALL with
		// two parameters per item (interpolated by the driver).
		"raw-union-all": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			var sb strings.Builder
			args := []any{}
			for i, it := range items {
				if i == 0 {
					sb.WriteString("SELECT ? AS k, ? AS e")
				} else {
					sb.WriteString(" UNION ALL SELECT ?, ?")
				}
				args = append(args, it.Key, it.Epoch)
			}
			q := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS, "{u}", sb.String()).Replace(`UPDATE ({u}) AS j
				JOIN {t} AS l ON l.lease_key = j.k AND l.epoch = j.e
				SET l.expires_at = {now} + ?, l.running = TRUE, l.updated_at = {now}
				WHERE l.owner = ? AND NOT l.released AND l.expires_at > {now}`)
			args = append(args, time.Hour.Microseconds(), owner)
			return func(ctx context.Context) error {
				return execAll(ctx, s, len(items), q, args...)
			}
		},
	},
}

// execAll runs a statement that must renew n terms.
func execAll(ctx context.Context, s *Store, n int, q string, args ...any) error {
	r, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if got, _ := r.RowsAffected(); got != int64(n) {
		return fmt.Errorf("renewed %d of %d", got, n)
	}
	return nil
}

// fillHeld inserts n live terms of owner (epoch 1), a few statements in all.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	items := make([]store.RenewItem, n)
	batch := make([]batchItem, n)
	for i := range items {
		items[i] = store.RenewItem{Key: fmt.Sprintf("bench/%06d", i+1), Epoch: 1, Running: true}
		batch[i] = batchItem{term: store.Term{Key: items[i].Key, Epoch: 1}, running: true}
	}
	insert := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS).Replace(`INSERT INTO {t}
		(lease_key, owner, epoch, expires_at, released, running, updated_at)
		SELECT UNHEX(j.k), ?, j.e, {now} + 3600000000, FALSE, j.r, {now}
		FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) PATH '$[0]', e BIGINT PATH '$[1]', r TINYINT PATH '$[2]')) AS j`)
	for c := range chunks(batch, true) {
		if _, err := s.db.ExecContext(ctx, insert, owner, c.doc); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.db.ExecContext(ctx, "ANALYZE TABLE `"+s.table+"`"); err != nil {
		b.Fatal(err)
	}
	return items
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }

// BenchmarkRenewOnASession is a process's steady renewal, its terms on its
// session, against the statement that renewed each record before sessions
// (the raw JSON_TABLE UPDATE above) and against the session's statement
// alone. The first renewal, which puts Fill's records on the session term
// by term, is timed apart.
//
//	go test -run '^$' -bench RenewOnASession -benchtime 10x ./store/mysql/
func BenchmarkRenewOnASession(b *testing.B) {
	offSessions := func(b *testing.B, st store.Store) {
		s := st.(*Store)
		off := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS).Replace(
			`UPDATE {t} SET session = 0, expires_at = {now} + 3600000000 WHERE lease_key <> ''`)
		if _, err := s.db.ExecContext(context.Background(), off); err != nil {
			b.Fatal(err)
		}
		s.book = sessionbook.Book{}
	}
	sessiontest.BenchRenewOnASession(b, sessiontest.BenchHarness{
		Open: func(b *testing.B, n int) (store.Store, []store.RenewItem) {
			s := tables.New(b)
			return s, fillHeld(b, s, storetest.BenchOwner, n)
		},
		OffSessions: offSessions,
		More: []sessiontest.BenchStep{
			{Name: "its statement alone", Run: func(b *testing.B, st store.Store, items []store.RenewItem) {
				s := st.(*Store)
				f, ok := s.book.Check(storetest.BenchOwner, time.Hour, items)
				if !ok {
					b.Fatal("the Book does not know the session")
				}
				owner := hexString(storetest.BenchOwner)
				for b.Loop() {
					err := execAll(context.Background(), s, 1, s.q.renewSession, time.Hour.Microseconds(), f.ID,
						owner, f.Version.N, f.Version.Tag, f.ID)
					if err != nil {
						b.Fatal(err)
					}
				}
			}},
			{Name: "per-record statement", Run: func(b *testing.B, s store.Store, items []store.RenewItem) {
				round := bench.Renewals["raw-json-table"](b, s, storetest.BenchOwner, items)
				offSessions(b, s)
				for b.Loop() {
					if err := round(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}},
		},
	})
}
