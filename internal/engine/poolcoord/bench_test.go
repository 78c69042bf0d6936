package poolcoord

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

// BenchmarkPlan measures one worker's whole plan as the engine asks for it
// each round: the holder's view of every pool key and membership in, the
// keys to claim and release out. The pool is settled (every key held, each
// worker holding every n-th key) and the workers do not change, so the
// policy's ranking cache is warm; what is left is the coordinator's and the
// policy's work per key.
//
//	go test ./internal/engine/poolcoord -run '^$' -bench 'BenchmarkPlan$' -benchmem
func BenchmarkPlan(b *testing.B) {
	for _, size := range []struct{ keys, workers int }{{100_000, 50}, {1_000_000, 100}} {
		b.Run(fmt.Sprintf("%dkKeys%dWorkers", size.keys/1000, size.workers), func(b *testing.B) {
			c, err := New(Config{Prefix: "app/", Pool: "mail", Self: "w000", Weight: 1, Policy: balance.NewBalanced(balance.Config{})})
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, size.keys)
			for i := range keys {
				keys[i] = fmt.Sprintf("acct-%07d", i)
			}
			if _, _, err := c.SetKeys(keys); err != nil {
				b.Fatal(err)
			}
			var table []Entry
			for w := range size.workers {
				table = append(table, Entry{Key: fmt.Sprintf("app/~workers/mail/w%03d@1", w), Owner: fmt.Sprintf("w%03d", w), Live: true, Running: true})
			}
			// The holder's view names each peer's pool key by its position
			// in the pool's index (hold.Keeper.Number), and this worker's
			// own by lease key, as the engine's does (Keeper.LiveOwners).
			for i, k := range keys {
				e := Entry{Index: c.Index(), At: i, Owner: table[i%size.workers].Owner, Live: true, Running: true}
				if e.Owner == "w000" {
					e.Key, e.Index, e.At = c.LeaseKey(k), nil, 0
				}
				table = append(table, e)
			}
			long := time.Unix(0, 0)
			self := Self{Member: true, Settled: true, HeldSince: func(string) (time.Time, bool) { return long, true }}
			now := time.Unix(1000, 0)
			plan(c, now, self, slices.Values(table))
			for b.Loop() {
				plan(c, now, self, slices.Values(table))
			}
		})
	}
}
