package hold_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// BenchmarkViewOf100000PoolKeys is what a pool worker's round costs the
// keeper at 100,000 pool keys, held by ten owners, this one among them:
// a whole read of the table into the view, and the plan's pass over it
// (LiveOwners) and the look for released keys, with the view by lease key
// and with the pool's keys numbered, side by side.
//
//	go test ./internal/engine/hold -run '^$' -bench ViewOf100000PoolKeys -benchmem -count 3
func BenchmarkViewOf100000PoolKeys(b *testing.B) {
	const n, owners = 100_000, 10
	keys := numbering{prefix: "p/"}
	ms := memstore.New(memstore.Options{})
	for i := range n {
		keys.keys = append(keys.keys, fmt.Sprintf("k%06d", i))
		ms.Put(store.Lease{Key: "p/" + keys.keys[i], Owner: fmt.Sprint("w", i%owners), Epoch: 1, Live: true, Running: true, TimeLeft: time.Hour})
	}
	index := make(map[string]int, n)
	for i, k := range keys.keys {
		index[k] = i
	}
	numbered := &mapNumbering{keys, index}
	for _, by := range []string{"lease key", "numbered"} {
		b.Run(by, func(b *testing.B) {
			ctx := context.Background()
			k := hold.New(freshStrings{Store: ms}, "w0", timing, nil)
			if by == "numbered" {
				k.Number(numbered)
			}
			for range b.N {
				if err := k.ObserveAll(ctx, ""); err != nil {
					b.Fatal(err)
				}
				live := 0
				k.LiveOwners(false, func(hold.Seen) bool { live++; return true })
				if live != n || len(k.Released()) != 0 {
					b.Fatalf("%d live, want %d", live, n)
				}
			}
		})
	}
}

// mapNumbering is numbering with a map to find keys in: a quick Find, as
// the pool's index has.
type mapNumbering struct {
	numbering
	index map[string]int
}

func (n *mapNumbering) Find(key string) (int, bool) {
	i, ok := n.index[key]
	return i, ok
}
