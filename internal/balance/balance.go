package balance

import (
	"math"
	"slices"
	"time"
)

// Worker is a live member of the pool.
type Worker struct {
	ID     string
	Weight float64 // > 0; 1 is the norm
	// Draining workers are stopping: they get no keys and hand theirs back.
	Draining bool
}

// View is one worker's snapshot of the pool at the start of a round.
type View struct {
	Self string
	Now  time.Time
	// Workers are the live members, this worker included.
	Workers []Worker
	// Keys are the pool's keys from its source.
	Keys []string
	// Owner maps a key to the owner of its live lease; absent means no live
	// lease (never held, released, or expired).
	Owner map[string]string
	// HeldSince maps the keys this worker holds to when it acquired them.
	HeldSince map[string]time.Time
}

// Plan is what a worker does this round.
type Plan struct {
	// Claim are free keys to acquire, best first.
	Claim []string
	// Release are held keys to give back: shed above the cap, or handed to
	// the worker that prefers them.
	Release []string
	// Target and Cap are this worker's fair share and claim limit.
	Target, Cap int
}

// Policy plans one worker's round.
type Policy interface {
	Plan(v View) Plan
}

// Config tunes the balanced policy. Zero fields take their defaults.
type Config struct {
	// Epsilon is the slack above fair share before a worker stops claiming
	// and starts shedding: cap = ceil(fair·(1+Epsilon)). Default 0.1.
	Epsilon float64
	// MaxKeys is a hard per-worker maximum; 0 means none.
	MaxKeys int
	// OrphanDelay is how long a key stays unowned before workers that do
	// not prefer it may claim it, so its preferred worker claims first.
	// Workers at or above their target wait twice as long, so orphans go
	// to the workers that need them. Default 2s.
	OrphanDelay time.Duration
	// MinHold is how long a key is kept before it may be handed over, so
	// the same key does not bounce. Default 30s.
	MinHold time.Duration
	// HandoffRate is the fraction of held keys a worker may hand over per
	// round (at least one). Default 0.1.
	HandoffRate float64
}

func (c Config) withDefaults() Config {
	if c.Epsilon <= 0 {
		c.Epsilon = 0.1
	}
	if c.OrphanDelay <= 0 {
		c.OrphanDelay = 2 * time.Second
	}
	if c.MinHold <= 0 {
		c.MinHold = 30 * time.Second
	}
	if c.HandoffRate <= 0 {
		c.HandoffRate = 0.1
	}
	return c
}

// Balanced is Tenure's pool policy: rendezvous preference, a cap slightly
// above fair share, orphan claims after a delay, shedding of the least
// preferred keys, and rate-limited handover to under-target workers. It
// remembers since when each key has been unowned, so keep one per worker.
type Balanced struct {
	cfg         Config
	orphanSince map[string]time.Time
}

// NewBalanced returns the balanced policy.
func NewBalanced(cfg Config) *Balanced {
	return &Balanced{cfg: cfg.withDefaults(), orphanSince: make(map[string]time.Time)}
}

// share computes each active worker's fair share (weighted) and cap.
type share struct {
	fair float64
	cap  int
}

func (b *Balanced) shares(active []Worker, keys int) map[string]share {
	total := 0.0
	for _, w := range active {
		total += w.Weight
	}
	out := make(map[string]share, len(active))
	for _, w := range active {
		fair := float64(keys) * w.Weight / total
		c := int(math.Ceil(fair * (1 + b.cfg.Epsilon)))
		if b.cfg.MaxKeys > 0 && c > b.cfg.MaxKeys {
			c = b.cfg.MaxKeys
		}
		out[w.ID] = share{fair: fair, cap: c}
	}
	return out
}

type heldKey struct {
	key       string
	preferred bool    // this worker is the key's preferred worker
	myValue   float64 // this worker's score: low means least preferred
	pref      string  // the preferred worker
}

// Plan implements Policy.
func (b *Balanced) Plan(v View) Plan {
	var active []Worker
	selfActive := false
	for _, w := range v.Workers {
		if w.Draining || w.Weight <= 0 {
			continue
		}
		active = append(active, w)
		if w.ID == v.Self {
			selfActive = true
		}
	}
	var plan Plan
	if !selfActive {
		// Draining (or not yet a member): claim nothing; the engine hands
		// every key back as it stops.
		return plan
	}
	shares := b.shares(active, len(v.Keys))
	mine := shares[v.Self]
	plan.Target, plan.Cap = int(math.Ceil(mine.fair)), mine.cap

	r := newRanker(active)
	self := slices.Index(r.ids, v.Self)
	counts := make(map[string]int, len(active))
	for _, owner := range v.Owner {
		counts[owner]++
	}

	var held []heldKey
	var preferredFree, orphans []heldKey
	seen := make(map[string]bool, len(v.Keys))
	for _, key := range v.Keys {
		seen[key] = true
		kh := hashString(key)
		top := r.top(kh)
		k := heldKey{key: key, preferred: top == self, myValue: r.value(kh, self), pref: r.ids[top]}
		owner, owned := v.Owner[key]
		switch {
		case owned && owner == v.Self:
			held = append(held, k)
			delete(b.orphanSince, key)
		case owned:
			delete(b.orphanSince, key)
		default:
			since, ok := b.orphanSince[key]
			if !ok {
				since = v.Now
				b.orphanSince[key] = since
			}
			delay := b.cfg.OrphanDelay
			if counts[v.Self] >= plan.Target {
				delay *= 2
			}
			switch {
			case k.preferred:
				preferredFree = append(preferredFree, k)
			case v.Now.Sub(since) >= delay:
				orphans = append(orphans, k)
			}
		}
	}
	for key := range b.orphanSince {
		if !seen[key] {
			delete(b.orphanSince, key)
		}
	}

	byValueDesc := func(a, b heldKey) int {
		switch {
		case a.myValue > b.myValue:
			return -1
		case a.myValue < b.myValue:
			return 1
		}
		return 0
	}

	// Claim: preferred keys first, then orphans, up to the cap.
	room := plan.Cap - len(held)
	slices.SortFunc(preferredFree, byValueDesc)
	slices.SortFunc(orphans, byValueDesc)
	for _, list := range [][]heldKey{preferredFree, orphans} {
		for _, k := range list {
			if room <= 0 {
				break
			}
			plan.Claim = append(plan.Claim, k.key)
			room--
		}
	}

	// Shed above the cap: the keys this worker is least preferred for.
	slices.SortFunc(held, func(a, b heldKey) int { return -byValueDesc(a, b) })
	released := make(map[string]bool)
	for i := 0; len(held)-len(released) > plan.Cap && i < len(held); i++ {
		released[held[i].key] = true
	}

	// Hand over: keys another worker prefers, to a preferred worker under
	// its target, after the minimum hold, a few per round.
	budget := max(1, int(math.Ceil(b.cfg.HandoffRate*float64(len(held)))))
	deficit := make(map[string]int)
	for _, w := range active {
		deficit[w.ID] = int(math.Ceil(shares[w.ID].fair)) - counts[w.ID]
	}
	for _, k := range held {
		if budget <= 0 {
			break
		}
		if released[k.key] || k.preferred || deficit[k.pref] <= 0 {
			continue
		}
		if since, ok := v.HeldSince[k.key]; ok && v.Now.Sub(since) < b.cfg.MinHold {
			continue
		}
		released[k.key] = true
		deficit[k.pref]--
		budget--
	}
	for _, k := range held {
		if released[k.key] {
			plan.Release = append(plan.Release, k.key)
		}
	}
	return plan
}
