package redis

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Run with: go test -run '^$' -bench . -benchtime 5x ./store/redis/
//
// Store.Renew sends one round trip (script calls of up to 1,000 terms);
// "naive" is one script call and round trip per key, as the reference
// coordinator renews.
var bench = storetest.BenchHarness{
	New:  func(b *testing.B) store.Store { return newTestStore(b) },
	Fill: fillHeld,
	Renewals: map[string]storetest.Renewal{
		// One owner-checked script call per key, written out by hand into a
		// single pipeline: one round trip, but Redis parses and runs a
		// script per key.
		"raw": func(b *testing.B, st store.Store, owner string, items []store.RenewItem) func(context.Context) error {
			s := st.(*Store)
			if err := renewScript.Load(context.Background(), s.client).Err(); err != nil {
				b.Fatal(err)
			}
			ttl := micros(time.Hour)
			return func(ctx context.Context) error {
				cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
					for _, it := range items {
						renewScript.EvalSha(ctx, p, s.keys, owner, ttl, it.Key, strconv.FormatInt(it.Epoch, 10), 1)
					}
					return nil
				})
				if err == nil && len(cmds) != len(items) {
					err = fmt.Errorf("%d replies for %d items", len(cmds), len(items))
				}
				return err
			}
		},
	},
}

// fillHeld acquires n keys for owner with pipelined acquisitions.
func fillHeld(b *testing.B, st store.Store, owner string, n int) []store.RenewItem {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if err := acquireScript.Load(ctx, s.client).Err(); err != nil {
		b.Fatal(err)
	}
	items := make([]store.RenewItem, 0, n)
	for start := 0; start < n; start += 1000 {
		var keys []string
		cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := start; i < min(start+1000, n); i++ {
				key := fmt.Sprintf("bench/%06d", i+1)
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
				b.Fatalf("fill: acquire %s: %+v %v", keys[i], res, err)
			}
			items = append(items, store.RenewItem{Key: keys[i], Epoch: res.Epoch, Running: true})
		}
	}
	return items
}

func BenchmarkRenew(b *testing.B)     { storetest.BenchRenew(b, bench) }
func BenchmarkAcquire(b *testing.B)   { storetest.BenchAcquire(b, bench) }
func BenchmarkList10000(b *testing.B) { storetest.BenchList(b, bench, 10000) }
