package balance

import "math"

// Shares: how many keys each worker should hold.

// Share is a worker's fair share of a pool's keys (weighted), its cap,
// the most it claims, and its low edge, the fewest it holds within its
// band: Fair·(1-Epsilon) rounded up, but no more than Fair rounded down.
// Below about ten keys a worker (at the default Epsilon) Epsilon·Fair is
// less than a key, and edges rounded up could add up to more keys than
// the pool has (39 keys over 8 workers: 8 edges of 5), so that some
// worker was always below its band and handing keys to it only made
// another one low.
type Share struct {
	Fair float64
	Cap  int
	Low  int
}

// Shares computes each active worker's Share of keys under cfg (its
// Epsilon, default applied) and each worker's own MaxKeys. Tools that show a pool (the web
// console) call it, so they show the shares the workers act on.
func Shares(cfg Config, active []Worker, keys int) map[string]Share {
	cfg = cfg.withDefaults()
	// Weights are summed relative to the largest, so that weights as
	// large as a float holds (--weight 1e308) do not overflow the sum and
	// leave every share zero.
	largest := 0.0
	for _, w := range active {
		largest = max(largest, w.Weight)
	}
	// A worker whose share by weight is above its MaxKeys gets MaxKeys, and
	// the keys it cannot hold are shared among the others, again by
	// weight, until no share is above it. A worker left with a share it
	// may not hold would stay under its target for good, handed keys it
	// sheds again.
	out := make(map[string]Share, len(active))
	left, open := float64(keys), active
	for len(open) > 0 {
		total := 0.0
		for _, w := range open {
			total += w.Weight / largest
		}
		var next []Worker
		capped := 0.0
		for _, w := range open {
			fair := left * (w.Weight / largest) / total
			if w.MaxKeys > 0 && fair > float64(w.MaxKeys) {
				out[w.ID] = Share{Fair: float64(w.MaxKeys), Cap: w.MaxKeys, Low: lowEdge(cfg, float64(w.MaxKeys))}
				capped += float64(w.MaxKeys)
				continue
			}
			next = append(next, w)
			c := int(math.Ceil(fair * (1 + cfg.Epsilon)))
			if w.MaxKeys > 0 && c > w.MaxKeys {
				c = w.MaxKeys
			}
			out[w.ID] = Share{Fair: fair, Cap: c, Low: lowEdge(cfg, fair)}
		}
		if capped == 0 {
			break
		}
		left -= capped
		open = next
	}
	return out
}

// lowEdge is Share.Low for a fair share.
func lowEdge(cfg Config, fair float64) int {
	return min(int(math.Ceil(fair*(1-cfg.Epsilon))), int(fair))
}
