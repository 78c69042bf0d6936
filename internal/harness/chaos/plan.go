package chaos

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Fault kinds.
const (
	FaultKill      = "kill"         // SIGKILL a holder; start a replacement
	FaultPause     = "pause"        // SIGSTOP a holder, SIGCONT it later
	FaultPartition = "partition"    // the store unreachable (one replica or all)
	FaultHold      = "hold-replies" // requests commit, replies are held back
	// FaultLoseReplies lets requests reach the store and commit, and drops
	// every reply and cuts its connection, for 0.1–0.75 TTL: the client hears
	// of a failure at once, reconnects and goes on (a server or middlebox
	// dying between applying a write and answering it). Unlike a held
	// reply, the replica is soon answered again and must carry on with
	// what its failed calls did in the store.
	FaultLoseReplies = "lose-replies"
	FaultLatency     = "latency" // added one-way latency to the store
	FaultRestart     = "restart" // SIGTERM a holder (graceful); start a replacement
	// FaultLogStall blocks a holder's log sink (its slog handler) for a
	// while, as a full stderr pipe or a stuck log shipper does; most such
	// stalls include a short partition, so the holder has an unconfirmed
	// renewal to log and a deadline to meet while its log is stuck.
	FaultLogStall = "log-stall"
	// FaultSlowStore makes every store call of one replica, or of all,
	// answer just within the call timeout: a store that is slow, not down.
	FaultSlowStore = "slow-store"
	// FaultSameOwner starts an extra replica configured with a live
	// holder's owner name (a shared hostname, a copied unit file), lets
	// both run, then stops the extra one gracefully.
	FaultSameOwner = "same-owner"
	// FaultFreezeWrapper SIGSTOPs a replica while a key's work runs as its
	// child (through a guard, as `tenure run` runs a command), and SIGCONTs
	// it later: the wrapper is frozen, the guard and the child are not.
	FaultFreezeWrapper = "freeze-wrapper"
	// FaultAbandon makes a holder of two keys or more stop renewing one of
	// them, without releasing it, while it goes on renewing the others —
	// what an engine does with a term it gave up on a deadline or left a
	// runner that would not stop to expire — and stop claiming that key
	// for a while (it was removed from its configuration). The store
	// must end the term on its own, however long the holder's other
	// terms, or a session they share, live on.
	FaultAbandon = "abandon"
	// FaultStoreRestart crashes and restarts the store itself, through
	// Options.RestartStore; drawn only when that is set.
	FaultStoreRestart = "store-restart"
	// FaultSourceDown restarts a replica (gracefully) as one whose pool
	// key source fails, and mends the source later (runs with a pool
	// only: Options.PoolKeys).
	FaultSourceDown = "source-down"
	// FaultLowMax restarts a replica (gracefully) as one whose pool takes
	// at most one key (tenure pool --max 1), among peers without a limit
	// (runs with a pool only).
	FaultLowMax = "low-max"
)

// FaultKinds lists every fault kind, in report order.
var FaultKinds = []string{FaultKill, FaultPause, FaultPartition, FaultHold, FaultLoseReplies, FaultLatency, FaultRestart,
	FaultLogStall, FaultSlowStore, FaultSameOwner, FaultFreezeWrapper, FaultAbandon, FaultStoreRestart, FaultSourceDown,
	FaultLowMax}

// faultWeights are the kinds' relative frequencies once every enabled
// kind has been drawn once.
var faultWeights = map[string]int{
	FaultKill: 22, FaultPause: 22, FaultPartition: 16, FaultHold: 10, FaultLoseReplies: 10, FaultLatency: 10, FaultRestart: 20,
	FaultLogStall: 14, FaultSlowStore: 14, FaultSameOwner: 12, FaultFreezeWrapper: 16, FaultAbandon: 12, FaultStoreRestart: 10,
	FaultSourceDown: 10, FaultLowMax: 8,
}

// Step is one fault of a schedule. Its target is resolved when it runs:
// the replica then holding key number Key, or, when no replica does, the
// live replica number Pick (modulo their count).
type Step struct {
	Fault string `json:"fault"`
	Key   int    `json:"key"`
	Pick  int    `json:"pick"`
	// All aims a network fault at every replica instead of one.
	All bool `json:"all,omitempty"`
	// Dur is how long a pause, a network fault, a log stall, a slow store,
	// a same-owner pair or a store restart lasts.
	Dur time.Duration `json:"dur,omitempty"`
	// Latency is the added one-way latency of a latency fault, and the
	// added round-trip time of every call in a slow-store fault.
	Latency time.Duration `json:"latency,omitempty"`
	// Blip is how long the store is unreachable from the target early in a
	// log stall (zero: a stall alone): long enough for one renewal to go
	// unconfirmed, which the engine logs, short of its deadline.
	Blip time.Duration `json:"blip,omitempty"`
	// Respawn is how long after a kill or restart the replacement starts.
	Respawn time.Duration `json:"respawn,omitempty"`
	// Gap is the quiet time after the fault has settled.
	Gap time.Duration `json:"gap"`
}

// planner draws steps from a seed. The same seed, timing, shape and
// fault kinds give the same sequence of steps, however many are drawn.
// The first steps go through every kind once, in an order drawn from the
// seed, so even a short run meets each class; after that, kinds are drawn
// by weight.
type planner struct {
	rng    *rand.Rand
	timing Timing
	keys   int
	kinds  []string
	first  []string // kinds not yet drawn in the opening round
}

func newPlanner(seed uint64, timing Timing, keys int, kinds []string) *planner {
	p := &planner{rng: rand.New(rand.NewPCG(seed, 0x7e9a5eed)), timing: timing, keys: keys}
	for _, k := range FaultKinds { // FaultKinds order, whatever order kinds came in
		if slices.Contains(kinds, k) {
			p.kinds = append(p.kinds, k)
		}
	}
	if len(p.kinds) == 0 {
		p.kinds = slices.Clone(FaultKinds)
	}
	p.first = slices.Clone(p.kinds)
	p.rng.Shuffle(len(p.first), func(i, j int) { p.first[i], p.first[j] = p.first[j], p.first[i] })
	return p
}

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
	case FaultFreezeWrapper:
		// Aimed at the holder of a key whose work runs as a child. From
		// short of the guard's deadline to well past a peer's takeover.
		s.Key = childKeyIndex(s.Key)
		s.Dur = between(0.5, 4)
	case FaultStoreRestart:
		s.Dur = between(0.25, 2) // how long the store stays down
	case FaultSourceDown, FaultLowMax:
		// Well past the pool bound (under 4 TTL with the harness's
		// timing), so that keys left to nobody show as a violation.
		s.Dur = between(5, 7)
	case FaultPartition, FaultHold:
		s.Dur = between(1, 3)
		s.All = p.rng.IntN(10) < 3
	case FaultLoseReplies:
		// Mostly within a holder's deadline, so that it keeps its keys
		// and goes on from what its unanswered calls did.
		s.Dur = between(0.1, 0.75)
		s.All = p.rng.IntN(10) < 3
	case FaultLatency:
		s.Dur = between(1, 3)
		s.All = p.rng.IntN(2) == 0
		// A tenth to three quarters of the call timeout one way: from
		// harmless to most calls timing out (a statement that needs two
		// round trips, such as a first prepare, then takes 1.5 timeouts).
		lo, hi := p.timing.CallTimeout/10, 3*p.timing.CallTimeout/4
		s.Latency = lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
	case FaultLogStall:
		// Long enough to outlast the holder's deadline and, from 1.5 TTL
		// on, a peer's takeover: a stall the engine waits on shows as a
		// short margin or as an overlap.
		s.Dur = between(1, 3)
		if p.rng.IntN(4) != 0 {
			// One renewal sent into it times out (CallTimeout), the next
			// gets through: the holder logs a failure, nothing more.
			s.Blip = p.timing.RenewEvery + 2*p.timing.CallTimeout
		}
	case FaultSlowStore:
		s.Dur = between(2, 4)
		s.All = p.rng.IntN(2) == 0
		// Every call answers, 0.6 to 0.9 call timeouts after it was sent.
		lo, hi := 6*p.timing.CallTimeout/10, 9*p.timing.CallTimeout/10
		s.Latency = lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
	case FaultSameOwner:
		// The extra replica needs a moment to start before it competes.
		s.Dur = between(1.5, 3)
	case FaultAbandon:
		// Past the bound of the check on every store (etcd's, about
		// 4.2 TTL with the harness's timing) by a second or more, so that
		// only a peer can end the wait.
		s.Dur = between(5, 6)
	}
	s.Gap = between(0.25, 1.5)
	return s
}

func (p *planner) kind() string {
	if len(p.first) > 0 {
		k := p.first[0]
		p.first = p.first[1:]
		return k
	}
	total := 0
	for _, k := range p.kinds {
		total += faultWeights[k]
	}
	n := p.rng.IntN(total)
	for _, k := range p.kinds {
		if n < faultWeights[k] {
			return k
		}
		n -= faultWeights[k]
	}
	return p.kinds[0]
}
