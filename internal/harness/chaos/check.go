package chaos

import (
	"fmt"
	"slices"
	"time"
)

// The invariants a run is checked against.
const (
	InvOverlap     = "one holder at a time"
	InvEpochUnique = "each epoch issued once"
	InvEpochOrder  = "epochs only grow"
	InvFence       = "fenced writes in epoch order"
	InvEarly       = "no takeover before expiry + grace"
	InvTakeover    = "crashed holder replaced in time"
	InvResume      = "paused holder stops on resume"
	InvMargin      = "fail-closed margin"
	InvHealth      = "replicas never crash"
)

// Invariants lists them in report order.
var Invariants = []string{InvOverlap, InvEpochUnique, InvEpochOrder, InvFence, InvEarly,
	InvTakeover, InvAbandoned, InvResume, InvMargin, InvStarved, InvLogStall, InvPoolRuns, InvHealth}

// Tolerances of the checks.
const (
	// ResumeBound is how soon a frozen holder whose term ended during the
	// pause must stop once it resumes. The overlap with its successor in
	// that moment is the documented limit of timing alone (fencing covers
	// it); beyond it, the overlap is a violation.
	ResumeBound = 500 * time.Millisecond
	// TakeoverSlack is added to TTL + Grace + RenewEvery for scheduling
	// and process start on a loaded host.
	TakeoverSlack = 750 * time.Millisecond
	// MarginTolerance is how far short of RenewEvery + Grace a runner
	// stopped for lack of renewals may stop before its successor starts
	// (timer and scheduling delay in the stopping process).
	MarginTolerance = 100 * time.Millisecond
	// clockTolerance absorbs rate differences between the store's clock
	// and CLOCK_MONOTONIC over a few seconds.
	clockTolerance = 5 * time.Millisecond
	// maxWallRate caps the wall clock's measured rate excess that the
	// early-takeover check forgives: more than this is no drift but a
	// step, and a step that shortens leases is worth reporting.
	maxWallRate = 0.01
)

// earlyTolerance is how much sooner than last confirmed renewal + TTL +
// grace (on CLOCK_MONOTONIC) a successor's grant may come without
// counting as early: clockTolerance, plus what a wall clock running fast
// takes off TTL + grace on stores that stamp expiries with it (the SQL
// stores, Redis). Some virtual machines' wall clocks run 0.5 % fast; the
// holder's margin of RenewEvery + Grace absorbs that (SAFETY.md), so it
// is the store keeping its own clock, not a broken promise.
func (c *checker) earlyTolerance() time.Duration {
	rate := min(max(c.m.wallRate, 0), maxWallRate)
	return clockTolerance + time.Duration(rate*float64(c.t.TTL+c.t.Grace))
}

// checker accumulates results while the checks run.
type checker struct {
	m       *model
	t       Timing
	rep     *Report
	results map[string]*InvariantResult
}

func (c *checker) checked(inv string, n int) { c.results[inv].Checked += n }

func (c *checker) violate(inv string, at int64, key, replica string, amount time.Duration, format string, args ...any) {
	r := c.results[inv]
	r.Violations++
	r.Worst = max(r.Worst, amount)
	c.rep.Violations = append(c.rep.Violations, Violation{Invariant: inv, At: c.m.since(at), Key: key,
		Replica: replica, Amount: amount, Detail: fmt.Sprintf(format, args...)})
}

// Check checks a history against every invariant and measures it.
func Check(h *History) *Report {
	m := buildModel(h)
	rep := &Report{Store: h.Store, Seed: h.Seed, Timing: h.Timing, Replicas: h.Replicas, Keys: len(h.Keys), PoolKeys: len(h.PoolKeys),
		Duration: time.Duration(m.end - m.begin), Faults: map[string]int{}, Kinds: h.Faults, History: h,
		WallClockPPM: m.wallRate * 1e6}
	c := &checker{m: m, t: h.Timing, rep: rep, results: map[string]*InvariantResult{}}
	for _, inv := range Invariants {
		c.results[inv] = &InvariantResult{Name: inv}
	}
	c.overlaps()
	c.epochs()
	c.fencedWrites()
	c.earlyTakeovers()
	c.crashTakeovers()
	c.abandons()
	c.resumes()
	c.margins()
	c.slowStores()
	c.logStalls()
	c.poolRuns()
	c.health()
	c.measure()
	for _, inv := range Invariants {
		rep.Invariants = append(rep.Invariants, *c.results[inv])
	}
	slices.SortStableFunc(rep.Violations, func(a, b Violation) int { return compareInt(int64(a.At), int64(b.At)) })
	return rep
}

// overlaps: no two replicas work on one key at once. A frozen process's
// interval is suspended while it is stopped; the moment between its
// resumption and its stop is allowed (and counted) when that stop comes
// within ResumeBound.
func (c *checker) overlaps() {
	for key, ivs := range c.m.intervals {
		// Every succession is a case, whether or not the two come near.
		c.checked(InvOverlap, max(len(ivs)-1, 0))
		for i, a := range ivs {
			for _, b := range ivs[i+1:] {
				if b.start >= a.end {
					break
				}
				// Two runners of one key in one replica overlap only if the
				// engine started a term before the last runner returned.
				var bad, excused time.Duration
				at := int64(-1)
				for _, sa := range a.live(a.start, a.end) {
					for _, sb := range b.live(b.start, b.end) {
						o := time.Duration(min(sa.to, sb.to) - max(sa.from, sb.from))
						if o <= 0 {
							continue
						}
						if c.promptTail(a, sa) || c.promptTail(b, sb) {
							excused += o
							continue
						}
						bad += o
						if at < 0 {
							at = max(sa.from, sb.from)
						}
					}
				}
				if excused > 0 {
					c.rep.PauseOverlaps++
					c.rep.WorstPauseOverlap = max(c.rep.WorstPauseOverlap, excused)
				}
				if bad > 0 {
					c.violate(InvOverlap, at, key, a.r.name+"+"+b.r.name, bad,
						"%s (epoch %d) and %s (epoch %d) both worked for %v", a.who(), a.epoch, b.who(), b.epoch, bad)
				}
			}
		}
	}
}

// promptTail: s is the last piece of iv, begins when its process was
// resumed (or the runner started within ResumeBound after a resumption:
// the engine checked the lease, then the process was frozen before the
// runner wrote its start), and the runner stopped within ResumeBound of
// that.
func (c *checker) promptTail(iv *interval, s span) bool {
	if !iv.ended() || s.to != iv.end || time.Duration(s.to-s.from) > ResumeBound {
		return false
	}
	for _, p := range iv.pauses() {
		if p.to == s.from {
			return true
		}
	}
	return c.startedFromPause(iv)
}

// startedFromPause: iv is a short run that began just after its process
// was resumed from a freeze and stopped within ResumeBound: the lease was
// checked before the freeze, and the start only recorded after it. Timing
// cannot prevent this (a pause between checking and acting); fencing
// orders its writes.
func (c *checker) startedFromPause(iv *interval) bool {
	if !iv.ended() || time.Duration(iv.end-iv.start) > ResumeBound {
		return false
	}
	for _, p := range iv.pauses() {
		if p.to <= iv.start && time.Duration(iv.start-p.to) <= ResumeBound {
			return true
		}
	}
	return false
}

// epochs: one process per (key, epoch), and no term starts after a newer
// one of its key has started or been granted. Processes, not owner ids,
// are counted: two processes the store knows by one id must not share a
// term either, since the fence could not tell their writes apart.
func (c *checker) epochs() {
	for key, terms := range c.m.terms {
		c.checked(InvEpochUnique, len(terms))
		holders := map[int64]map[string]bool{}
		add := func(epoch int64, r *replicaInfo) {
			if r == nil {
				return
			}
			if holders[epoch] == nil {
				holders[epoch] = map[string]bool{}
			}
			holders[epoch][fmt.Sprintf("%s (%s)", r.name, r.owner)] = true
		}
		for _, t := range terms {
			if t.replica != "" {
				add(t.epoch, c.m.replicas[t.replica])
			}
		}
		for _, iv := range c.m.intervals[key] {
			add(iv.epoch, iv.r)
		}
		for _, t := range terms {
			if n := len(holders[t.epoch]); n > 1 {
				c.violate(InvEpochUnique, t.granted, key, "", 0, "epoch %d was given to %d processes: %v",
					t.epoch, n, sortedKeys(holders[t.epoch]))
			}
		}
	}
	for key, ivs := range c.m.intervals {
		var newest *interval
		for _, iv := range ivs {
			c.checked(InvEpochOrder, 1)
			if newest != nil && iv.epoch < newest.epoch && !c.startedFromPause(iv) {
				c.violate(InvEpochOrder, iv.start, key, iv.r.name, 0,
					"%s started epoch %d after %s had started epoch %d", iv.r.name, iv.epoch, newest.r.name, newest.epoch)
			}
			if newest == nil || iv.epoch > newest.epoch {
				newest = iv
			}
		}
	}
	// A grant whose request was sent after another grant's reply arrived
	// must carry a greater epoch.
	for key, acq := range c.m.acquires {
		bySent := slices.Clone(acq)
		slices.SortFunc(bySent, func(a, b Event) int { return compareInt(a.Sent, b.Sent) })
		j, best := 0, Event{}
		for _, b := range bySent {
			for ; j < len(acq) && acq[j].T < b.Sent; j++ {
				if acq[j].Epoch > best.Epoch {
					best = acq[j]
				}
			}
			c.checked(InvEpochOrder, 1)
			if best.Epoch >= b.Epoch {
				c.violate(InvEpochOrder, b.T, key, b.Replica, 0,
					"%s was granted epoch %d after %s had been granted epoch %d", b.Replica, b.Epoch, best.Replica, best.Epoch)
			}
		}
	}
}

// fencedWrites: in commit order (the row's counter) the accepted writes'
// epochs never decrease, each saw an older or equal epoch in the row, and
// a refusal always names a newer epoch.
func (c *checker) fencedWrites() {
	for key, ws := range c.m.writes {
		var accepted []Event
		for _, w := range ws {
			switch w.Outcome {
			case outAccepted:
				accepted = append(accepted, w)
				if w.Prev > w.Epoch {
					c.violate(InvFence, w.T, key, w.Replica, 0,
						"%s wrote with epoch %d over a row written by epoch %d", w.Replica, w.Epoch, w.Prev)
				}
			case outRejected:
				c.checked(InvFence, 1)
				if w.Cur != 0 && w.Cur <= w.Epoch {
					c.violate(InvFence, w.T, key, w.Replica, 0,
						"%s's write with epoch %d was refused by the fence at epoch %d", w.Replica, w.Epoch, w.Cur)
				}
			}
		}
		slices.SortFunc(accepted, func(a, b Event) int { return compareInt(a.Seq, b.Seq) })
		c.checked(InvFence, len(accepted))
		for i := 1; i < len(accepted); i++ {
			prev, w := accepted[i-1], accepted[i]
			switch {
			case w.Seq == prev.Seq:
				c.violate(InvFence, w.T, key, w.Replica, 0, "two writes committed as number %d (%s and %s)",
					w.Seq, prev.Replica, w.Replica)
			case w.Epoch < prev.Epoch:
				c.violate(InvFence, w.T, key, w.Replica, 0,
					"%s's write with epoch %d was accepted after %s's with epoch %d", w.Replica, w.Epoch, prev.Replica, prev.Epoch)
			}
		}
	}
}

// earlyTakeovers: a term taken from a peer that did not release it is
// granted no sooner than the peer's last confirmed renewal + TTL + grace.
func (c *checker) earlyTakeovers() {
	for key, terms := range c.m.terms {
		for i := 1; i < len(terms); i++ {
			a, b := terms[i-1], terms[i]
			// A grant earlier than its predecessor's is the epoch checks' business.
			// A process may renew its own term into a new one; another
			// process may not, even one the store knows by the same id.
			if a.replica == b.replica || a.released || a.lastConfirmed == 0 || b.granted == 0 || b.granted <= a.granted {
				continue
			}
			c.checked(InvEarly, 1)
			bound := a.lastConfirmed + int64(c.t.TTL+c.t.Grace-c.earlyTolerance())
			if b.granted < bound {
				early := time.Duration(bound - b.granted)
				c.violate(InvEarly, b.granted, key, b.replica, early,
					"epoch %d granted %v before epoch %d's last confirmed renewal + TTL + grace", b.epoch, early, a.epoch)
			}
		}
	}
}

// expiryLag is how long past a term's expiry + grace a store itself may
// keep peers out. etcd revokes an expired lease, and deletes its keys, only
// when its lessor's timer next fires (every 500 ms), then commits the
// revocation through raft (store/etcd's doc says so).
var expiryLag = map[string]time.Duration{kindEtcd: 500 * time.Millisecond}

// takeoverBound is how soon a crashed holder's keys must run elsewhere.
func (c *checker) takeoverBound() time.Duration {
	return takeoverBoundOf(c.t, c.rep.History.Kind)
}

// takeoverBoundOf is the takeover bound of a store kind under timing t.
func takeoverBoundOf(t Timing, kind string) time.Duration {
	return t.TTL + t.Grace + t.RenewEvery + TakeoverSlack + expiryLag[kind]
}

// crashTakeovers: each key a killed replica was running is running on
// another within the bound, measured from the kill.
func (c *checker) crashTakeovers() {
	bound := c.takeoverBound()
	c.rep.Takeover.Bound = bound
	var lat []time.Duration
	for _, f := range c.m.faults {
		if f.kind != FaultKill {
			continue
		}
		r := c.m.replicas[f.target]
		for key, ivs := range c.m.intervals {
			held := slices.ContainsFunc(ivs, func(iv *interval) bool { return iv.r == r && iv.start <= f.from && iv.end >= f.from })
			// A key a peer already runs (taken over while the killed
			// replica was frozen) has nobody left to replace.
			elsewhere := slices.ContainsFunc(ivs, func(iv *interval) bool { return iv.r != r && iv.start <= f.from && iv.end > f.from })
			if !held || elsewhere {
				continue
			}
			keyBound := bound
			if isPoolKey(key) {
				keyBound = c.poolBound() // an orphan may wait for a worker to claim it
			}
			next := slices.IndexFunc(ivs, func(iv *interval) bool { return iv.r != r && iv.start >= f.from })
			if next < 0 {
				// As for a late takeover, another fault within the bound
				// (the successor killed too) excuses it.
				if f.from+int64(keyBound) < c.m.end && !c.otherFault(f, f.from+int64(keyBound)) {
					c.checked(InvTakeover, 1)
					c.violate(InvTakeover, f.from, key, r.name, 0, "nobody took over from %s (killed)", r.name)
				}
				continue
			}
			d := time.Duration(ivs[next].start - f.from)
			if c.otherFault(f, ivs[next].start) {
				continue
			}
			c.checked(InvTakeover, 1)
			if keyBound == bound {
				lat = append(lat, d) // the report's latencies are the singletons'
			}
			if d > keyBound {
				c.violate(InvTakeover, ivs[next].start, key, ivs[next].r.name, d-keyBound,
					"%s took over %v after %s was killed (bound %v)%s", ivs[next].r.name, d, r.name, keyBound, c.trail(key, r, f.from, ivs[next].start))
			}
		}
	}
	c.rep.Takeover.set(lat)
}

// otherFault reports whether a fault other than f began between f and at.
func (c *checker) otherFault(f faultWindow, at int64) bool {
	for _, g := range c.m.faults {
		if g != f && g.from >= f.from && g.from <= at {
			return true
		}
	}
	return false
}

// resumes: a holder frozen while a peer took its key stops within
// ResumeBound of resuming.
func (c *checker) resumes() {
	var lat []time.Duration
	for _, r := range c.m.replicas {
		for _, p := range r.pauses {
			for key, ivs := range c.m.intervals {
				for _, iv := range ivs {
					// A child's work is not frozen with its wrapper: the
					// overlap and margin checks judge it like any other.
					if iv.r != r || iv.pid != 0 || iv.start > p.from || iv.end < p.to {
						continue
					}
					tookOver := slices.ContainsFunc(ivs, func(o *interval) bool { return o.r != r && o.start >= p.from && o.start <= p.to })
					d := time.Duration(iv.end - p.to)
					if tookOver || iv.ended() && d < c.t.TTL && (iv.cause == causeDeadline || iv.cause == causeLost) {
						lat = append(lat, d)
					}
					if !tookOver {
						continue
					}
					c.checked(InvResume, 1)
					if !iv.ended() || d > ResumeBound {
						c.violate(InvResume, p.to, key, r.name, d,
							"%s resumed after a peer took epoch %d's key and kept working for %v (cause %q)", r.name, iv.epoch, d, iv.cause)
					}
				}
			}
		}
	}
	c.rep.ResumeStop.Bound = ResumeBound
	c.rep.ResumeStop.set(lat)
}

// margins: a runner stopped for lack of confirmed renewals (not frozen
// meanwhile, neither its term nor a later one released before the
// successor started) stops
// at least RenewEvery + Grace before another replica starts the key. A
// release sent after the successor started cannot have let it in: a
// holder resumed from a freeze releases the term it lost meanwhile.
func (c *checker) margins() {
	promised := c.t.RenewEvery + c.t.Grace
	c.rep.Margin.Promised = promised
	first := true
	for key, ivs := range c.m.intervals {
		for i, iv := range ivs {
			if !iv.stopped || iv.cause != causeDeadline || iv.frozenDuring(iv.end-int64(c.t.TTL+c.t.Grace), iv.end) {
				continue
			}
			next := slices.IndexFunc(ivs[i+1:], func(o *interval) bool { return o.r != iv.r && o.start >= iv.end })
			if next < 0 {
				continue
			}
			nx := ivs[i+1+next]
			if nx.epoch <= iv.epoch {
				continue // not a successor term: the epoch checks deal with it
			}
			if c.releasedBetween(key, iv.epoch, nx.epoch, nx.start) {
				continue
			}
			got := time.Duration(nx.start - iv.end)
			c.checked(InvMargin, 1)
			if first || got < c.rep.Margin.Min {
				c.rep.Margin.Min, first = got, false
			}
			c.rep.Margin.N++
			if got < promised-MarginTolerance {
				c.violate(InvMargin, iv.end, key, iv.r.name, promised-got,
					"%s stopped epoch %d only %v before %s started epoch %d (promised %v)", iv.who(), iv.epoch, got, nx.who(), nx.epoch, promised)
			}
		}
	}
}

// releasedBetween reports whether a Release was sent by at for a term of
// key from epoch from up to (not including) epoch to: the successor then
// took over from a release, which owes no margin — also when the released
// term came between the two, as when the holder took the key again once
// the store answered and handed it over at once.
func (c *checker) releasedBetween(key string, from, to, at int64) bool {
	for _, t := range c.m.terms[key] {
		if t.epoch >= from && t.epoch < to && t.released && t.releaseSent <= at {
			return true
		}
	}
	return false
}

// health: no replica exited unexpectedly or printed a panic or data race.
func (c *checker) health() {
	c.checked(InvHealth, len(c.m.replicas))
	for _, e := range c.m.crashes {
		what := "exited unexpectedly: " + e.Err
		if e.Ev == evDiag {
			what = "reported: " + e.Err
		}
		c.violate(InvHealth, e.T, "", e.Target, 0, "%s %s (see %s.stderr)", e.Target, what, e.Target)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
