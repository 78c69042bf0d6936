package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

const benchOwner = "bench-owner"

// seed inserts n live terms of benchOwner (keys key-00000…, epoch 1) in one
// transaction — far faster than n acquisitions, each of which commits.
func seed(b *testing.B, s *Store, n int) []store.RenewItem {
	b.Helper()
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
		items[i] = store.RenewItem{Key: fmt.Sprintf("key-%05d", i), Epoch: 1, Running: true}
		if _, err := stmt.ExecContext(ctx, items[i].Key, benchOwner); err != nil {
			b.Fatal(err)
		}
	}
	stmt.Close()
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return items
}

func BenchmarkRenew(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("keys=%d/store-batched", n), func(b *testing.B) {
			s := openTemp(b, Options{})
			items := seed(b, s, n)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ok, err := s.Renew(ctx, benchOwner, time.Hour, items)
				if err != nil {
					b.Fatal(err)
				}
				if !ok[0] || !ok[n-1] {
					b.Fatal("a seeded term was not renewed")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})

		// The reference design: one UPDATE per key, here at least inside one
		// transaction so that it pays for one commit, not n.
		b.Run(fmt.Sprintf("keys=%d/naive-per-key", n), func(b *testing.B) {
			s := openTemp(b, Options{})
			items := seed(b, s, n)
			ctx := context.Background()
			query := `UPDATE ` + s.table + ` SET expires_at = ` + nowUS + ` + ?, running = ?, updated_at = ` + nowUS + `
WHERE key = ? AND epoch = ? AND owner = ? AND released = 0 AND expires_at > ` + nowUS
			ttl := time.Hour.Microseconds()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tx, err := s.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				renewed := 0
				for _, it := range items {
					res, err := tx.ExecContext(ctx, query, ttl, boolInt(it.Running), it.Key, it.Epoch, benchOwner)
					if err != nil {
						b.Fatal(err)
					}
					if k, _ := res.RowsAffected(); k == 1 {
						renewed++
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				if renewed != n {
					b.Fatalf("renewed %d of %d", renewed, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})

		// The batched statement alone, its JSON argument built outside the
		// timer and no results mapped back: the floor for store-batched.
		b.Run(fmt.Sprintf("keys=%d/raw-batched-sql", n), func(b *testing.B) {
			s := openTemp(b, Options{})
			items := seed(b, s, n)
			ctx := context.Background()
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
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := s.db.ExecContext(ctx, query, benchOwner, ttl, string(arg))
				if err != nil {
					b.Fatal(err)
				}
				if k, _ := res.RowsAffected(); k != int64(n) {
					b.Fatalf("renewed %d of %d", k, n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}

func BenchmarkAcquire(b *testing.B) {
	s := openTemp(b, Options{})
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = fmt.Sprintf("fresh-%d", i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: keys[i], Owner: benchOwner, TTL: time.Minute, Grace: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if !res.Acquired {
			b.Fatal("a fresh key was refused")
		}
	}
}

func BenchmarkList10000(b *testing.B) {
	s := openTemp(b, Options{})
	seed(b, s, 10000)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ls, err := s.List(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) != 10000 {
			b.Fatalf("listed %d", len(ls))
		}
	}
}
