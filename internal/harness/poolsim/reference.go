package poolsim

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

// ReferenceConfig tunes [Reference]. Zero fields take the reference
// coordinator's defaults.
type ReferenceConfig struct {
	// MaxAccountsPerWorker caps the keys one worker claims. The reference
	// default is large enough to be unlimited in practice: 100,000.
	MaxAccountsPerWorker int
	// RebalanceInterval is how often a worker checks whether to shed.
	// Default 60s, as in the reference.
	RebalanceInterval time.Duration
}

// Reference is the pool policy of the reference design, a webmail sync
// coordinator, ported as a balance.Policy so the simulator can run it
// beside Tenure's. It is the baseline, for comparison only, weaknesses and
// all: a newcomer gets keys only from the periodic shed, and a shed drops
// the newest claims, not the keys another worker prefers.
//
//   - Claim: every free key, in the worker's scan order, up to
//     MaxAccountsPerWorker. The reference scans a Redis set; here each
//     worker scans in a stable pseudo-random order of its own.
//   - Shed: every RebalanceInterval, when it holds more than
//     int(1.2·keys/workers)+5, it releases the excess, newest claims first.
//
// Keep one per worker: it remembers the order of its claims.
type Reference struct {
	cfg ReferenceConfig

	scan    []int    // this worker's scan order: positions in scanSrc
	scanSrc []string // the key slice scan was built from

	claims    []string // held keys, oldest claim first
	claimed   map[string]bool
	lastClaim []string // what the previous plan asked to claim, in order

	nextRebalance time.Time
}

// NewReference returns the reference policy.
func NewReference(cfg ReferenceConfig) *Reference {
	if cfg.MaxAccountsPerWorker <= 0 {
		cfg.MaxAccountsPerWorker = 100_000
	}
	if cfg.RebalanceInterval <= 0 {
		cfg.RebalanceInterval = 60 * time.Second
	}
	return &Reference{cfg: cfg, claimed: make(map[string]bool)}
}

// Threshold is the reference's shed threshold: int(1.2·keys/workers)+5.
func Threshold(keys, workers int) int {
	return int(float64(keys)/float64(max(workers, 1))*1.2) + 5
}

// Plan implements balance.Policy.
func (r *Reference) Plan(v balance.View) balance.Plan {
	var plan balance.Plan
	workers, member := 0, false
	for _, w := range v.Workers {
		if w.Draining {
			continue
		}
		workers++
		member = member || w.ID == v.Self
	}
	if !member {
		return plan
	}
	plan.Target = int(math.Ceil(float64(len(v.Keys)) / float64(workers)))
	plan.Cap = Threshold(len(v.Keys), workers)
	r.track(v)

	// The reference's rebalance loop sleeps an interval before its first
	// step, so a worker never sheds in its first minute.
	shed := map[string]bool{}
	switch {
	case r.nextRebalance.IsZero():
		r.nextRebalance = v.Now.Add(r.cfg.RebalanceInterval)
	case !v.Now.Before(r.nextRebalance):
		r.nextRebalance = v.Now.Add(r.cfg.RebalanceInterval)
		if excess := len(r.claims) - plan.Cap; excess > 0 {
			// Newest claims first: exactly the keys that just moved here.
			plan.Release = slices.Clone(r.claims[len(r.claims)-excess:])
			for _, k := range plan.Release {
				shed[k] = true
			}
		}
	}

	room := r.cfg.MaxAccountsPerWorker - (len(r.claims) - len(shed))
	for _, i := range r.scanOrder(v) {
		if room <= 0 {
			break
		}
		if v.Owner(i) != "" {
			continue
		}
		plan.Claim = append(plan.Claim, v.Keys[i])
		room--
	}
	r.lastClaim = plan.Claim
	return plan
}

// track brings the claim order up to date with the keys the view says
// this worker holds: keys no longer held leave it, new ones join at the
// end in the order they were claimed.
func (r *Reference) track(v balance.View) {
	held := make(map[string]bool)
	for i, k := range v.Keys {
		if v.Owner(i) == v.Self {
			held[k] = true
		}
	}
	r.claims = slices.DeleteFunc(r.claims, func(k string) bool {
		if !held[k] {
			delete(r.claimed, k)
			return true
		}
		return false
	})
	for _, k := range r.lastClaim {
		if held[k] && !r.claimed[k] {
			r.claims = append(r.claims, k)
			r.claimed[k] = true
		}
	}
	// Keys held but not claimed by the last plan (a seeded start): oldest
	// first, then by key so the order is deterministic.
	var rest []string
	for k := range held {
		if !r.claimed[k] {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(rest, func(a, b string) int {
		if c := v.HeldSince[a].Compare(v.HeldSince[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for _, k := range rest {
		r.claims = append(r.claims, k)
		r.claimed[k] = true
	}
}

// scanOrder is this worker's stable pseudo-random order of the keys,
// rebuilt only when the key slice changes.
func (r *Reference) scanOrder(v balance.View) []int {
	if len(r.scanSrc) == len(v.Keys) && (len(v.Keys) == 0 || &r.scanSrc[0] == &v.Keys[0]) {
		return r.scan
	}
	type ranked struct {
		key  string
		rank uint64
		i    int
	}
	rs := make([]ranked, len(v.Keys))
	for i, k := range v.Keys {
		rs[i] = ranked{k, balance.Score(k, v.Self), i}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		switch {
		case a.rank < b.rank:
			return -1
		case a.rank > b.rank:
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	r.scan = make([]int, len(rs))
	for i, x := range rs {
		r.scan[i] = x.i
	}
	r.scanSrc = v.Keys
	return r.scan
}
