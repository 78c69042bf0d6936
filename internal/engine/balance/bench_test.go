package balance

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPlan measures one worker's plan in a settled pool, where every
// key is held by its preferred worker. Cold plans follow a change of the
// worker set (the last worker leaves and rejoins, alternately), so every
// key's preference is ranked again; warm plans see the same workers, listed
// in a different order each round as the engine lists them.
func BenchmarkPlan(b *testing.B) {
	for _, size := range []struct{ keys, workers int }{{100_000, 50}, {1_000_000, 100}} {
		keys := keysN(size.keys)
		ws := workers(size.workers)
		owner, held := settledPool(ws, keys, "w00")
		name := fmt.Sprintf("%dkKeys%dWorkers", size.keys/1000, size.workers)
		if size.keys%1_000_000 == 0 {
			name = fmt.Sprintf("%dMKeys%dWorkers", size.keys/1_000_000, size.workers)
		}
		view := func(ws []Worker) View {
			return View{Self: "w00", Now: time.Unix(1000, 0), Workers: ws, Keys: keys, Owners: ownersOf(keys, owner), HeldSince: held}
		}
		b.Run(name+"/cold", func(b *testing.B) {
			views := []View{view(ws[:len(ws)-1]), view(ws)}
			pol := NewBalanced(Config{})
			pol.Plan(views[1]) // only a policy's first plan sizes its cache: leave it out
			i := 0
			for b.Loop() {
				pol.Plan(views[i%2])
				i++
			}
		})
		b.Run(name+"/warm", func(b *testing.B) {
			reversed := make([]Worker, len(ws))
			for i, w := range ws {
				reversed[len(ws)-1-i] = w
			}
			views := []View{view(ws), view(reversed)}
			pol := NewBalanced(Config{})
			pol.Plan(views[0])
			i := 0
			for b.Loop() {
				pol.Plan(views[i%2])
				i++
			}
		})
	}
}

// settledPool gives every key to its preferred worker among ws (all of
// weight 1), held by self for an hour.
func settledPool(ws []Worker, keys []string, self string) (map[string]string, map[string]time.Time) {
	hashes := make([]uint64, len(ws))
	for i, w := range ws {
		hashes[i] = hashString(w.ID)
	}
	owner := make(map[string]string, len(keys))
	held := make(map[string]time.Time)
	for _, k := range keys {
		kh := hashString(k)
		best, bestH := 0, uint64(0)
		for i, wh := range hashes {
			if h := pairHash(kh, wh); i == 0 || h > bestH || h == bestH && ws[i].ID < ws[best].ID {
				best, bestH = i, h
			}
		}
		owner[k] = ws[best].ID
		if owner[k] == self {
			held[k] = time.Unix(0, 0)
		}
	}
	return owner, held
}
