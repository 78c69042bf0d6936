package chaos

import (
	"math/rand/v2"
	"time"
)

// Fault kinds.
const (
	FaultKill      = "kill"         // SIGKILL a holder; start a replacement
	FaultPause     = "pause"        // SIGSTOP a holder, SIGCONT it later
	FaultPartition = "partition"    // the store unreachable (one replica or all)
	FaultHold      = "hold-replies" // requests commit, replies are held back
	FaultLatency   = "latency"      // added one-way latency to the store
	FaultRestart   = "restart"      // SIGTERM a holder (graceful); start a replacement
	// FaultStoreRestart crashes and restarts the store itself, through
	// Options.RestartStore; drawn only when that is set.
	FaultStoreRestart = "store-restart"
)

// FaultKinds lists every fault kind, in report order.
var FaultKinds = []string{FaultKill, FaultPause, FaultPartition, FaultHold, FaultLatency, FaultRestart, FaultStoreRestart}

// Step is one fault of a schedule. Its target is resolved when it runs:
// the replica then holding key number Key, or, when no replica does, the
// live replica number Pick (modulo their count).
type Step struct {
	Fault string `json:"fault"`
	Key   int    `json:"key"`
	Pick  int    `json:"pick"`
	// All aims a network fault at every replica instead of one.
	All bool `json:"all,omitempty"`
	// Dur is how long a pause, a network fault or a store restart lasts.
	Dur time.Duration `json:"dur,omitempty"`
	// Latency is the added one-way latency of a latency fault.
	Latency time.Duration `json:"latency,omitempty"`
	// Respawn is how long after a kill or restart the replacement starts.
	Respawn time.Duration `json:"respawn,omitempty"`
	// Gap is the quiet time after the fault has settled.
	Gap time.Duration `json:"gap"`
}

// planner draws steps from a seed. The same seed, timing and shape give
// the same sequence of steps, however many are drawn.
type planner struct {
	rng    *rand.Rand
	timing Timing
	keys   int
}

func newPlanner(seed uint64, timing Timing, keys int) *planner {
	return &planner{rng: rand.New(rand.NewPCG(seed, 0x7e9a5eed)), timing: timing, keys: keys}
}

// weights of the fault kinds, in FaultKinds order.
var faultWeights = []int{22, 22, 16, 10, 10, 20, 10}

func (p *planner) next() Step {
	ttl := p.timing.TTL
	between := func(lo, hi float64) time.Duration {
		return time.Duration((lo + p.rng.Float64()*(hi-lo)) * float64(ttl))
	}
	s := Step{Fault: p.kind(), Key: p.rng.IntN(p.keys), Pick: p.rng.IntN(1 << 16)}
	switch s.Fault {
	case FaultKill:
		s.Respawn = between(0, 1)
	case FaultRestart:
		s.Respawn = between(0, 0.5)
	case FaultPause:
		s.Dur = between(0.5, 4)
	case FaultStoreRestart:
		s.Dur = between(0.25, 2) // how long the store stays down
	case FaultPartition, FaultHold:
		s.Dur = between(1, 3)
		s.All = p.rng.IntN(10) < 3
	case FaultLatency:
		s.Dur = between(1, 3)
		s.All = p.rng.IntN(2) == 0
		// A tenth to three quarters of the call timeout one way: from
		// harmless to most calls timing out (a statement that needs two
		// round trips, such as a first prepare, then takes 1.5 timeouts).
		lo, hi := p.timing.CallTimeout/10, 3*p.timing.CallTimeout/4
		s.Latency = lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
	}
	s.Gap = between(0.25, 1.5)
	return s
}

func (p *planner) kind() string {
	total := 0
	for _, w := range faultWeights {
		total += w
	}
	n := p.rng.IntN(total)
	for i, w := range faultWeights {
		if n < w {
			return FaultKinds[i]
		}
		n -= w
	}
	return FaultKinds[0]
}
