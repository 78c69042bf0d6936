package chaos

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
)

// A run with Options.PoolKeys also shares that many keys among its
// replicas in a pool. Their work is the singletons' workload, so every
// check of overlaps, epochs and fencing covers the pool's hand-overs too;
// one more check asks that each pool key run somewhere (InvPoolRuns),
// the source-down fault plays a replica that cannot read the pool's keys,
// and low-max one that takes at most one of them.

// poolName is the run's pool.
const poolName = "chaos"

// InvPoolRuns: outside the faults that stop work for a while, there is an
// instant in every stretch of poolBound at which every pool key runs. A
// replica that cannot read the pool's keys must not take a share of them:
// when it did, its peers stopped claiming at their lowered caps and keys
// ran nowhere in turn for as long as its source failed.
const InvPoolRuns = "pool keys run somewhere"

// chaosPool is the replica's pool: hand-overs after a short MinHold, so
// that a run of minutes sees many, and the keys re-read every round, so
// that a source that comes back is read at once.
func chaosPool(spec replicaSpec, w *workload) tenure.Pool {
	down := spec.SourceDown
	return tenure.Pool{
		Name: poolName,
		Source: tenure.KeySourceFunc(func(context.Context) ([]string, error) {
			if _, err := os.Stat(down); err == nil {
				return nil, errors.New("chaos: the pool's key source is down")
			}
			return spec.Pool, nil
		}),
		RefreshEvery: spec.Timing.RenewEvery,
		MinHold:      5 * spec.Timing.RenewEvery,
		MaxKeys:      spec.PoolMaxKeys,
		// A pool's runner is given the key as the source lists it; the
		// work is recorded under its lease key, as the store calls are,
		// so that each check finds a term's calls and work together.
		Runner: tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			l.Key = poolkey.Key(spec.Prefix, poolName, l.Key)
			return w.run(ctx, l)
		}),
	}
}

// sourceDown is the file whose existence makes p's pool source fail.
func (p *proc) sourceDown() string { return p.control + ".src" }

func (p *proc) setSourceDown(down bool) error {
	if down {
		return os.WriteFile(p.sourceDown(), nil, 0o600)
	}
	if err := os.Remove(p.sourceDown()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// needsPool reports whether fault kind f plays a pool's replica.
func needsPool(f string) bool { return f == FaultSourceDown || f == FaultLowMax }

// restartAs restarts p gracefully as a replica started as o says, and
// after the step's duration mends it with mend, if not nil; the window
// lasts until then. source-down starts one whose pool source fails (a
// command missing from a new image, a database it cannot reach) and
// mends the source; low-max starts one that takes at most one of the
// pool's keys, among peers without a limit, and leaves it so.
func (h *harness) restartAs(ctx context.Context, p *proc, s Step, o spawnOpts, mend func(q *proc)) {
	p.expected.Store(true)
	h.hl.add(Event{Ev: evFaultBegin, Fault: s.Fault, Target: p.name, PID: p.pid, Dur: int64(s.Dur)})
	h.halt(p, false)
	h.retire(p)
	// Claimed (o.busy) until the step is done: another fault (with
	// Concurrency above one) would cut the scenario short.
	q, err := h.spawnWith(o)
	if err != nil {
		h.log.Error("could not start a replacement replica", "err", err)
	} else {
		_ = sleepCtx(ctx, s.Dur)
		if mend != nil {
			mend(q)
		}
		h.mu.Lock()
		q.busy = false
		h.mu.Unlock()
	}
	h.hl.add(Event{Ev: evFaultEnd, Fault: s.Fault, Target: p.name})
}

// poolBound is how long a pool key may run nowhere outside other faults:
// the takeover bound, and twice the orphan delay (1.5 renewal periods by
// default) that a replica not preferred for a key, at or above its
// target, waits before it claims the key.
func (c *checker) poolBound() time.Duration { return poolBoundOf(c.t, c.rep.History.Kind) }

// poolBoundOf is the pool bound of a store kind under timing t.
func poolBoundOf(t Timing, kind string) time.Duration {
	return takeoverBoundOf(t, kind) + 3*t.RenewEvery
}

// isPoolKey reports whether key is a pool's key.
func isPoolKey(key string) bool {
	_, _, _, ok := poolkey.ParseKey(key)
	return ok
}

// stopsWork are the faults that may leave a pool key to nobody for a
// while, each checked on its own terms: a process killed, frozen or cut
// off, calls that time out, a second process under one owner name, the
// store down. A graceful restart or source-down, a slow store that
// answers in time, a stalled log (its blip is a partition of its own) and
// an abandoned singleton must not.
var stopsWork = map[string]bool{
	FaultKill: true, FaultPause: true, FaultFreezeWrapper: true, FaultPartition: true, FaultHold: true,
	FaultLoseReplies: true, FaultLatency: true, FaultSameOwner: true, FaultStoreRestart: true,
}

// poolRuns checks InvPoolRuns. From the run's start to its end, the
// stretches in which some pool key ran nowhere are merged across keys: a
// spell is a stretch with no instant at which every key ran. A replica
// that takes a share it cannot run leaves keys to nobody in turn (handed
// to it, never claimed, taken back after the orphan delay), each for a
// few seconds only, so a bound on each key alone misses it. Each fault
// that stops work excuses the part of a spell from its start to a
// poolBound after its end; what is left of the spell, piece by piece,
// must be no longer than poolBound. The check counts the whole seconds
// of the run it applied to, outside those windows (Report.PoolChecked):
// with faults back to back, that can be little.
func (c *checker) poolRuns() {
	if len(c.m.h.PoolKeys) == 0 {
		return
	}
	bound := c.poolBound()
	var gaps []span
	for _, key := range c.m.h.PoolKeys {
		covered := c.m.begin
		for _, iv := range c.m.intervals[key] {
			if iv.start > covered {
				gaps = append(gaps, span{covered, min(iv.start, c.m.end)})
			}
			covered = max(covered, iv.end)
		}
		if covered < c.m.end {
			gaps = append(gaps, span{covered, c.m.end})
		}
	}
	var excused []span
	for _, f := range c.m.faults {
		if stopsWork[f.kind] {
			excused = append(excused, span{f.from, f.to + int64(bound)})
		}
	}
	excused = mergeSpans(excused)
	for _, s := range cutSpans(span{c.m.begin, c.m.end}, excused) {
		c.rep.PoolChecked += time.Duration(s.to - s.from)
	}
	c.checked(InvPoolRuns, int(c.rep.PoolChecked/time.Second))
	for _, sp := range mergeSpans(gaps) {
		for _, piece := range cutSpans(sp, excused) {
			if d := time.Duration(piece.to - piece.from); d > bound {
				c.violate(InvPoolRuns, piece.from, "", "", d-bound,
					"for %v no instant had every pool key running (bound %v)", d, bound)
			}
		}
	}
}

// mergeSpans sorts spans and joins those that overlap or touch.
func mergeSpans(spans []span) []span {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b span) int { return compareInt(a.from, b.from) })
	var out []span
	for _, s := range spans {
		if s.to <= s.from {
			continue
		}
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// cutSpans is what is left of s outside the sorted, disjoint spans holes.
func cutSpans(s span, holes []span) []span {
	var out []span
	from := s.from
	for _, h := range holes {
		if h.to <= from || h.from >= s.to {
			continue
		}
		if h.from > from {
			out = append(out, span{from, h.from})
		}
		from = max(from, h.to)
	}
	if from < s.to {
		out = append(out, span{from, s.to})
	}
	return out
}
