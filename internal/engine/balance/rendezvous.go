// Package balance decides which keys of a pool one worker claims, sheds and
// hands over, from a snapshot of the pool. It does no I/O and keeps no
// clock: the engine builds a View each round and carries out the Plan.
//
// Each key has a preferred worker, chosen by weighted rendezvous hashing
// over the live, non-draining workers. Rendezvous hashing moves the minimum
// number of keys when a worker joins or leaves: only the keys whose top
// choice changed, about K/(W+1) on a join and K/W on a leave.
package balance

import "math"

// hashString is a stable 64-bit hash (FNV-1a, then mixed): stable across
// processes and versions, since every worker must agree on it.
func hashString(s string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037) // FNV-1a 64 offset basis
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return mix(h)
}

// mix is the splitmix64 finalizer: it spreads the bits of a combination of
// two hashes so that each (key, worker) pair gets an independent score.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Score is the rendezvous score of key for worker, before weighting: the
// same on every process and version. Other orderings of keys per worker
// (the reference policy's scan order) use it rather than a hash of their
// own.
func Score(key, worker string) uint64 { return pairHash(hashString(key), hashString(worker)) }

// pairHash combines a key's and a worker's hashes.
func pairHash(key, worker uint64) uint64 {
	return mix(key ^ (worker * 0x9e3779b97f4a7c15))
}

// score is worker's weighted rendezvous score for a key: -w / ln(u) with u
// uniform in (0, 1). The worker with the highest score is preferred; a
// worker of weight 2 is preferred for twice as many keys as one of weight 1.
func score(h uint64, weight float64) float64 {
	u := (float64(h>>11) + 0.5) / (1 << 53) // in (0, 1)
	return -weight / math.Log(u)
}

// ranker scores keys against a fixed set of workers.
type ranker struct {
	ids     []string
	hashes  []uint64
	weights []float64
	rest    []int // 1, 2, …: the workers top compares with the first
	uniform bool  // all weights equal: compare raw hashes, no logarithms
}

func newRanker(workers []Worker) *ranker {
	r := &ranker{uniform: true}
	for i, w := range workers {
		r.ids = append(r.ids, w.ID)
		name := w.Name
		if name == "" {
			name = w.ID
		}
		r.hashes = append(r.hashes, hashString(name))
		r.weights = append(r.weights, w.Weight)
		if i > 0 {
			r.rest = append(r.rest, i)
		}
		if i > 0 && w.Weight != workers[0].Weight {
			r.uniform = false
		}
	}
	return r
}

// value is the comparable score of worker i for a key hash.
func (r *ranker) value(keyHash uint64, i int) float64 {
	h := pairHash(keyHash, r.hashes[i])
	if r.uniform {
		return float64(h)
	}
	return score(h, r.weights[i])
}

// rank orders worker i's keys as its scores for them do, in 4 bytes: for
// one worker, the score rises with the pair hash whatever the weight (the
// raw hash itself with equal weights, -w/ln(u) with u rising with it
// otherwise), so the pair hash's top 32 bits order its keys the same,
// with a tie about once in 4 billion pairs. Unlike a score rounded to
// fewer bits, it cannot overflow or lose its order at extreme weights (a
// float32 score is +Inf for every key at weight 1e40).
func (r *ranker) rank(keyHash uint64, i int) uint32 {
	return uint32(pairHash(keyHash, r.hashes[i]) >> 32)
}

// top returns the index of the preferred worker for a key hash, or -1
// when there are no workers.
func (r *ranker) top(keyHash uint64) int {
	if len(r.ids) == 0 {
		return -1
	}
	return r.topAmong(keyHash, 0, r.rest)
}

// topAmong returns the preferred of worker best and the workers of
// others for a key hash. The preferred worker of a set is the highest of
// one order, the score and then the lower ID, so it can be found a part
// at a time: a cache that knows a key's preferred worker finds the one of
// a larger set by comparing it with the newcomers only.
func (r *ranker) topAmong(keyHash uint64, best int, others []int) int {
	if r.uniform {
		// Equal weights: the largest raw hash wins, no logarithms.
		bestH := pairHash(keyHash, r.hashes[best])
		for _, i := range others {
			if h := pairHash(keyHash, r.hashes[i]); h > bestH || h == bestH && r.ids[i] < r.ids[best] {
				best, bestH = i, h
			}
		}
		return best
	}
	bestV := r.value(keyHash, best)
	for _, i := range others {
		if v := r.value(keyHash, i); v > bestV || v == bestV && r.ids[i] < r.ids[best] {
			best, bestV = i, v
		}
	}
	return best
}

// Preferred returns each key's preferred worker among ws, position for
// position: the worker a settled pool gives it to. Tools that model a
// pool start from it.
func Preferred(ws []Worker, keys []string) []string {
	r := newRanker(ws)
	out := make([]string, len(keys))
	for i, k := range keys {
		if t := r.top(hashString(k)); t >= 0 {
			out[i] = ws[t].ID
		}
	}
	return out
}
