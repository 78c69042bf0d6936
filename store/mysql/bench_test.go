package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/mysql/

const benchOwner = "bench-owner"

// seedHeld fills a fresh table with n live terms of benchOwner (epoch 1),
// a few statements in all, and returns the renewal items for them.
func seedHeld(b *testing.B, n int) (*Store, []store.RenewItem) {
	b.Helper()
	s := newTestStore(b)
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
		if _, err := s.db.ExecContext(ctx, insert, benchOwner, c.doc); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.db.ExecContext(ctx, "ANALYZE TABLE `"+s.table+"`"); err != nil {
		b.Fatal(err)
	}
	return s, items
}

func perKey(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/key")
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
			perKey(b, n)
		})

		// The reference design: one autocommit UPDATE per key, sequential
		// round trips, with the same conditions as a batched renewal.
		b.Run(fmt.Sprintf("keys=%d/naive", n), func(b *testing.B) {
			s, items := seedHeld(b, n)
			q := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS).Replace(`UPDATE {t}
				SET expires_at = {now} + ?, running = ?, updated_at = {now}
				WHERE lease_key = ? AND epoch = ? AND owner = ? AND NOT released AND expires_at > {now}`)
			ttl := time.Hour.Microseconds()
			b.ResetTimer()
			for b.Loop() {
				for _, it := range items {
					r, err := s.db.ExecContext(ctx, q, ttl, it.Running, it.Key, it.Epoch, benchOwner)
					if err != nil {
						b.Fatal(err)
					}
					if n, _ := r.RowsAffected(); n != 1 {
						b.Fatalf("%s was not renewed", it.Key)
					}
				}
			}
			perKey(b, n)
		})

		// The bare batched statement, written by hand: keys as JSON text, a
		// plain join, no renew id, the document built once. The gap to
		// "batched" is what Store.Renew adds.
		b.Run(fmt.Sprintf("keys=%d/raw-json-table", n), func(b *testing.B) {
			s, items := seedHeld(b, n)
			q := strings.NewReplacer("{t}", "`"+s.table+"`", "{now}", nowUS).Replace(`UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
					k VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
					e BIGINT PATH '$[1]', r TINYINT PATH '$[2]')) AS j
				JOIN {t} AS l ON l.lease_key = j.k AND l.epoch = j.e
				SET l.expires_at = {now} + ?, l.running = j.r, l.updated_at = {now}
				WHERE l.owner = ? AND NOT l.released AND l.expires_at > {now}`)
			rows := make([][3]any, n)
			for i, it := range items {
				rows[i] = [3]any{it.Key, it.Epoch, 1}
			}
			doc, err := json.Marshal(rows)
			if err != nil {
				b.Fatal(err)
			}
			ttl := time.Hour.Microseconds()
			b.ResetTimer()
			for b.Loop() {
				r, err := s.db.ExecContext(ctx, q, string(doc), ttl, benchOwner)
				if err != nil {
					b.Fatal(err)
				}
				if got, _ := r.RowsAffected(); got != int64(n) {
					b.Fatalf("renewed %d of %d", got, n)
				}
			}
			perKey(b, n)
		})

		// The other way to build a derived table: SELECT … UNION ALL with
		// two parameters per item (interpolated by the driver).
		b.Run(fmt.Sprintf("keys=%d/raw-union-all", n), func(b *testing.B) {
			s, items := seedHeld(b, n)
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
			args = append(args, time.Hour.Microseconds(), benchOwner)
			b.ResetTimer()
			for b.Loop() {
				r, err := s.db.ExecContext(ctx, q, args...)
				if err != nil {
					b.Fatal(err)
				}
				if got, _ := r.RowsAffected(); got != int64(n) {
					b.Fatalf("renewed %d of %d", got, n)
				}
			}
			perKey(b, n)
		})
	}
}

func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	// A key never seen: the takeover UPDATE finds nothing, the holder read
	// finds nothing, the INSERT creates it.
	b.Run("new-key", func(b *testing.B) {
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
	// The owner takes its key again: one UPDATE.
	b.Run("takeover", func(b *testing.B) {
		s := newTestStore(b)
		for b.Loop() {
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: "mine", Owner: "a", TTL: time.Minute})
			if err != nil || !res.Acquired {
				b.Fatalf("Acquire = %+v, %v", res, err)
			}
		}
	})
	// Refused: the UPDATE and the holder read.
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
