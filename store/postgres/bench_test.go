package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/postgres/

var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return tables.New(b) },
	Fill: fillHeld,
	Renewals: map[string]storetest.Renewal{
		// The reference design: one autocommit UPDATE per key, sequential
		// round trips, with the same WHERE clause as a batched renewal.
		"naive": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			q := `UPDATE ` + s.ident + ` SET expires_at = clock_timestamp() + $4 * interval '1 microsecond',
				running = $5, updated_at = clock_timestamp()
				WHERE key = $1 AND epoch = $2 AND owner = $3 AND NOT released AND expires_at > clock_timestamp()`
			ttl := time.Hour.Microseconds()
			return func(ctx context.Context) error {
				for _, it := range items {
					tag, err := s.pool.Exec(ctx, q, it.Key, it.Epoch, owner, ttl, it.Running)
					if err != nil {
						return err
					}
					if tag.RowsAffected() != 1 {
						return fmt.Errorf("%s was not renewed", it.Key)
					}
				}
				return nil
			}
		},
		// The plain single unnest UPDATE, without the lock-first CTE that
		// Store.Renew adds so that a renewal queued behind a row lock reads
		// the clock after its wait. The gap between the two is that cost.
		"raw-unnest": func(_ *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			q := `UPDATE ` + s.ident + ` AS t SET expires_at = clock_timestamp() + $5 * interval '1 microsecond',
				running = u.running, updated_at = clock_timestamp()
				FROM unnest($2::text[], $3::bigint[], $4::boolean[]) AS u(key, epoch, running)
				WHERE t.key = u.key COLLATE "C" AND t.epoch = u.epoch AND t.owner = $1
					AND NOT t.released AND t.expires_at > clock_timestamp()
				RETURNING t.key`
			keys := make([]string, len(items))
			epochs := make([]int64, len(items))
			running := make([]bool, len(items))
			for i, it := range items {
				keys[i], epochs[i], running[i] = it.Key, it.Epoch, it.Running
			}
			ttl := time.Hour.Microseconds()
			return func(ctx context.Context) error {
				rows, err := s.pool.Query(ctx, q, owner, keys, epochs, running, ttl)
				if err != nil {
					return err
				}
				got := 0
				for rows.Next() {
					got++
				}
				if err := rows.Err(); err != nil {
					return err
				}
				if got != len(items) {
					return fmt.Errorf("renewed %d of %d", got, len(items))
				}
				return nil
			}
		},
	},
}

// fillHeld inserts n live terms of owner (epoch 1) in one statement.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.ident+` (key, owner, epoch, expires_at, released, running, updated_at)
		SELECT format('bench/%s', lpad(i::text, 6, '0')), $1, 1, clock_timestamp() + interval '1 hour', false, true, clock_timestamp()
		FROM generate_series(1, $2) AS i`, owner, n)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE "+s.ident); err != nil {
		b.Fatal(err)
	}
	items := make([]store.RenewItem, n)
	for i := range items {
		items[i] = store.RenewItem{Key: fmt.Sprintf("bench/%06d", i+1), Epoch: 1, Running: true}
	}
	return items
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }

// BenchmarkRenewOnASession is a process's steady renewal, its terms on its
// session, against the statement that renewed each record before sessions
// (the raw unnest UPDATE above) and against the session's statement alone.
// The first renewal, which puts Fill's records on the session term by
// term, is timed apart.
//
//	go test -run '^$' -bench RenewOnASession -benchtime 20x ./store/postgres/
func BenchmarkRenewOnASession(b *testing.B) {
	offSessions := func(b *testing.B, st store.Store) {
		s := st.(*Store)
		if _, err := s.pool.Exec(context.Background(), `UPDATE `+s.ident+` SET session = 0, expires_at = clock_timestamp() + interval '1 hour' WHERE key <> ''`); err != nil {
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
				for b.Loop() {
					var (
						version, tag int64
						key          *string
						epoch        *int64
					)
					err := s.pool.QueryRow(context.Background(), s.sess.renewFast, f.ID, storetest.BenchOwner, f.Version.N,
						[]string{}, []int64{}, []bool{}, []string{}, []int64{}, []bool{}, time.Hour.Microseconds(), f.Version.Tag,
					).Scan(&version, &tag, &key, &epoch)
					if err != nil {
						b.Fatal(err)
					}
				}
			}},
			{Name: "per-record statement", Run: func(b *testing.B, s store.Store, items []store.RenewItem) {
				round := bench.Renewals["raw-unnest"](b, s, storetest.BenchOwner, items)
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
