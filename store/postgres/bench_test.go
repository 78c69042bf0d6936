package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/postgres/

const benchOwner = "bench-owner"

// seedHeld fills a fresh table with n live terms of benchOwner (epoch 1) in
// one statement and returns the renewal items for them.
func seedHeld(b *testing.B, n int) (*Store, []store.RenewItem) {
	b.Helper()
	s := newTestStore(b)
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.ident+` (key, owner, epoch, expires_at, released, running, updated_at)
		SELECT format('bench/%s', lpad(i::text, 6, '0')), $1, 1, clock_timestamp() + interval '1 hour', false, true, clock_timestamp()
		FROM generate_series(1, $2) AS i`, benchOwner, n)
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
	return s, items
}

func BenchmarkRenew(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d/batched", n), func(b *testing.B) {
			s, items := seedHeld(b, n)
			b.ResetTimer()
			for b.Loop() {
				got, err := s.Renew(ctx, benchOwner, time.Hour, items)
				if err != nil {
					b.Fatal(err)
				}
				if !got[0] || !got[n-1] {
					b.Fatal("a lease was not renewed")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/key")
		})

		// The reference design: one autocommit UPDATE per key, sequential
		// round trips, with the same WHERE clause as a batched renewal.
		b.Run(fmt.Sprintf("keys=%d/naive", n), func(b *testing.B) {
			s, items := seedHeld(b, n)
			q := `UPDATE ` + s.ident + ` SET expires_at = clock_timestamp() + $4 * interval '1 microsecond',
				running = $5, updated_at = clock_timestamp()
				WHERE key = $1 AND epoch = $2 AND owner = $3 AND NOT released AND expires_at > clock_timestamp()`
			ttl := time.Hour.Microseconds()
			b.ResetTimer()
			for b.Loop() {
				for _, it := range items {
					tag, err := s.pool.Exec(ctx, q, it.Key, it.Epoch, benchOwner, ttl, it.Running)
					if err != nil {
						b.Fatal(err)
					}
					if tag.RowsAffected() != 1 {
						b.Fatalf("%s was not renewed", it.Key)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/key")
		})

		// The plain single unnest UPDATE, without the lock-first CTE that
		// Store.Renew adds so that a renewal queued behind a row lock reads
		// the clock after its wait. The gap between the two is that cost.
		b.Run(fmt.Sprintf("keys=%d/raw-unnest", n), func(b *testing.B) {
			s, items := seedHeld(b, n)
			q := `UPDATE ` + s.ident + ` AS t SET expires_at = clock_timestamp() + $5 * interval '1 microsecond',
				running = u.running, updated_at = clock_timestamp()
				FROM unnest($2::text[], $3::bigint[], $4::boolean[]) AS u(key, epoch, running)
				WHERE t.key = u.key COLLATE "C" AND t.epoch = u.epoch AND t.owner = $1
					AND NOT t.released AND t.expires_at > clock_timestamp()
				RETURNING t.key`
			keys := make([]string, n)
			epochs := make([]int64, n)
			running := make([]bool, n)
			for i, it := range items {
				keys[i], epochs[i], running[i] = it.Key, it.Epoch, it.Running
			}
			ttl := time.Hour.Microseconds()
			b.ResetTimer()
			for b.Loop() {
				rows, err := s.pool.Query(ctx, q, benchOwner, keys, epochs, running, ttl)
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				for rows.Next() {
					got++
				}
				if err := rows.Err(); err != nil {
					b.Fatal(err)
				}
				if got != n {
					b.Fatalf("renewed %d of %d", got, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/key")
		})
	}
}

func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	b.Run("free", func(b *testing.B) {
		s := newTestStore(b)
		if err := s.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			i++
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: fmt.Sprintf("free/%d", i), Owner: "a", TTL: time.Minute})
			if err != nil || !res.Acquired {
				b.Fatalf("Acquire = %+v, %v", res, err)
			}
		}
	})
	b.Run("held-by-peer", func(b *testing.B) {
		s := newTestStore(b)
		if _, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Owner: "a", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Owner: "b", TTL: time.Minute})
			if err != nil || res.Acquired {
				b.Fatalf("Acquire = %+v, %v", res, err)
			}
		}
	})
}

func BenchmarkList10000(b *testing.B) {
	ctx := context.Background()
	s, _ := seedHeld(b, 10000)
	b.ResetTimer()
	for b.Loop() {
		ls, err := s.List(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) != 10000 {
			b.Fatalf("listed %d leases", len(ls))
		}
	}
}
