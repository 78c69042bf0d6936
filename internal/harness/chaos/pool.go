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
// and the source-down fault plays a replica that cannot read the pool's
// keys.

// poolName is the run's pool.
const poolName = "chaos"

// InvPoolRuns: outside the faults that stop work for a while, every pool
// key runs at some instant of every stretch of poolBound. A replica that cannot read the
// pool's keys must not take a share of them: when it did, its peers
// stopped claiming at their lowered caps and keys ran nowhere for as long
// as its source failed.
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

// sourceDownFault restarts p gracefully as a replica whose pool source
// fails (a command missing from a new image, a database it cannot
// reach), and mends the source after the step's duration. The window
// lasts until then.
func (h *harness) sourceDownFault(ctx context.Context, p *proc, s Step) {
	p.expected.Store(true)
	h.hl.add(Event{Ev: evFaultBegin, Fault: FaultSourceDown, Target: p.name, PID: p.pid, Dur: int64(s.Dur)})
	h.halt(p, false)
	h.retire(p)
	q, err := h.spawnWith(spawnOpts{sourceDown: true})
	if err != nil {
		h.log.Error("could not start a replacement replica", "err", err)
	} else {
		_ = sleepCtx(ctx, s.Dur)
		if err := q.setSourceDown(false); err != nil {
			h.log.Error("could not mend a replica's pool source", "replica", q.name, "err", err)
		}
	}
	h.hl.add(Event{Ev: evFaultEnd, Fault: FaultSourceDown, Target: p.name})
}

// poolBound is how long a pool key may run nowhere outside other faults:
// the takeover bound, and twice the orphan delay (1.5 renewal periods by
// default) that a replica not preferred for a key, at or above its
// target, waits before it claims the key.
func (c *checker) poolBound() time.Duration {
	return c.takeoverBound() + 3*c.t.RenewEvery
}

// isPoolKey reports whether key is a pool's key.
func isPoolKey(key string) bool {
	_, _, _, ok := poolkey.ParseKey(key)
	return ok
}

// poolRuns checks InvPoolRuns. From the run's start to its end, the
// spells in which some pool key ran nowhere are merged across keys: a
// spell is a stretch with no instant at which every key ran. A replica
// that takes a share it cannot run leaves keys to nobody in turn (handed
// to it, never claimed, taken back after the orphan delay), each for a
// few seconds only, so a bound on each key alone misses it. A spell within
// poolBound of another fault than a graceful restart or source-down
// (which stop no work for long) is excused: those have checks of their
// own.
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
	slices.SortFunc(gaps, func(a, b span) int { return compareInt(a.from, b.from) })
	var spells []span
	for _, g := range gaps {
		if g.to <= g.from {
			continue
		}
		if n := len(spells); n > 0 && g.from <= spells[n-1].to {
			spells[n-1].to = max(spells[n-1].to, g.to)
			continue
		}
		spells = append(spells, g)
	}
	// From the run's start: warmUp waits until every key runs.
	c.checked(InvPoolRuns, len(spells))
	for _, sp := range spells {
		d := time.Duration(sp.to - sp.from)
		if d > bound && !c.stoppingFaultNear(sp.from, sp.to, bound) {
			c.violate(InvPoolRuns, sp.from, "", "", d-bound, "some pool key ran nowhere at every moment of %v (bound %v)", d, bound)
		}
	}
}

// stoppingFaultNear reports whether a fault that may stop work for a
// while (not a graceful restart or source-down) was under way between
// from - bound and to.
func (c *checker) stoppingFaultNear(from, to int64, bound time.Duration) bool {
	for _, f := range c.m.faults {
		if f.kind == FaultRestart || f.kind == FaultSourceDown {
			continue
		}
		if f.from <= to && f.to+int64(bound) >= from {
			return true
		}
	}
	return false
}
