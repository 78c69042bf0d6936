package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
)

// fill acquires n keys for owner with pipelined acquisitions (setup only)
// and returns them as renewal items.
func fill(b testing.TB, s *Store, n int, owner string) []store.RenewItem {
	b.Helper()
	ctx := context.Background()
	if err := acquireScript.Load(ctx, s.client).Err(); err != nil {
		b.Fatal(err)
	}
	items := make([]store.RenewItem, 0, n)
	for start := 0; start < n; start += 1000 {
		var keys []string
		cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := start; i < min(start+1000, n); i++ {
				key := fmt.Sprintf("pool/account-%06d", i)
				keys = append(keys, key)
				acquireScript.EvalSha(ctx, p, s.keys, key, owner, micros(time.Hour), 0, 1, s.channel)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		for i, c := range cmds {
			res, err := parseAcquire(keys[i], c.(*goredis.Cmd).Val().([]any))
			if err != nil || !res.Acquired {
				b.Fatalf("setup acquire %s: %+v %v", keys[i], res, err)
			}
			items = append(items, store.RenewItem{Key: keys[i], Epoch: res.Epoch, Running: true})
		}
	}
	return items
}

// BenchmarkRenew compares one renewal round of every lease a worker holds:
//
//   - store: Store.Renew, one round trip (script calls of up to 1,000 terms);
//   - naive: one script call and round trip per key, as the reference
//     coordinator renews;
//   - raw: one owner-checked script call per key, written out by hand into a
//     single pipeline — one round trip, but Redis parses and runs a script
//     per key.
func BenchmarkRenew(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			s := newTestStore(b)
			const owner = "worker-1"
			items := fill(b, s, n, owner)
			ctx := context.Background()

			b.Run("store", func(b *testing.B) {
				for b.Loop() {
					ok, err := s.Renew(ctx, owner, time.Hour, items)
					if err != nil || len(ok) != n || !ok[n-1] {
						b.Fatalf("renew: %v", err)
					}
				}
			})
			b.Run("naive", func(b *testing.B) {
				for b.Loop() {
					for _, it := range items {
						ok, err := s.Renew(ctx, owner, time.Hour, []store.RenewItem{it})
						if err != nil || !ok[0] {
							b.Fatalf("renew %s: %v", it.Key, err)
						}
					}
				}
			})
			b.Run("raw", func(b *testing.B) {
				ttl := micros(time.Hour)
				if err := renewScript.Load(ctx, s.client).Err(); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
						for _, it := range items {
							renewScript.EvalSha(ctx, p, s.keys, owner, ttl, it.Key, strconv.FormatInt(it.Epoch, 10), 1)
						}
						return nil
					})
					if err != nil || len(cmds) != n {
						b.Fatalf("pipeline: %v", err)
					}
				}
			})
		})
	}
}

// BenchmarkAcquire starts a term of a new key per operation.
func BenchmarkAcquire(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		res, err := s.Acquire(ctx, store.AcquireRequest{
			Key: "bench/" + strconv.Itoa(i), Owner: "worker-1", TTL: time.Hour, Grace: time.Second,
		})
		if err != nil || !res.Acquired {
			b.Fatalf("acquire: %+v %v", res, err)
		}
		i++
	}
}

// BenchmarkList10000 reads a namespace of 10,000 leases, as the engine does
// every round to learn who leads each key.
func BenchmarkList10000(b *testing.B) {
	s := newTestStore(b)
	fill(b, s, 10000, "worker-1")
	ctx := context.Background()
	for b.Loop() {
		leases, err := s.List(ctx, "")
		if err != nil || len(leases) != 10000 {
			b.Fatalf("list: %d leases, %v", len(leases), err)
		}
	}
}
