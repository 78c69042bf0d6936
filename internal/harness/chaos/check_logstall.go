package chaos

import (
	"slices"
	"time"
)

// InvLogStall: a replica whose log sink blocks goes on working. The log
// is for people: a stalled one may cost log lines, never the rounds that
// acquire and start work or the renewals that keep it. (When the engine
// wrote each record from the loop that logged it, a replica whose stderr
// stalled made no store call from its first record to the stall's end,
// and lost its keys at their deadline although the store answered.)
const InvLogStall = "stalled log stops no work"

// logStallBound is the longest a replica with a stalled log may go
// without a store call of its supervision loop once the store answers
// again: its rounds come every RenewEvery, so this is several missed
// rounds, with the slack a loaded host needs.
func (c *checker) logStallBound() time.Duration { return c.t.TTL + TakeoverSlack }

// logStalls checks InvLogStall. From the moment the store answers the
// stalled replica again (the end of the stall's blip, or the stall's
// start) to the stall's end, its calls other than renewals (the table
// reads, acquisitions and releases of its rounds) must come no further
// apart than logStallBound, unless it was paused or under another fault
// meanwhile. Renewals are left out: a replica holding keys renews with
// its rounds stuck, and one that holds none makes none.
func (c *checker) logStalls() {
	bound := int64(c.logStallBound())
	for _, f := range c.m.faults {
		r := c.m.replicas[f.target]
		if f.kind != FaultLogStall || r == nil {
			continue
		}
		back, blip := f.from, faultWindow{}
		for _, g := range c.m.faults {
			if g.kind == FaultPartition && g.target == f.target && g.from >= f.from && g.to <= f.to {
				back, blip = max(back, g.to), g
			}
		}
		if f.to-back <= bound || r.pausedDuring(back, f.to) || slices.ContainsFunc(c.m.faults, func(g faultWindow) bool {
			return g != f && g != blip && g.involves(r) && g.from <= f.to && g.to >= back
		}) {
			continue
		}
		c.checked(InvLogStall, 1)
		last, gap, at := back, int64(0), back
		for _, e := range r.calls {
			if e.Ev == evRenew || e.Sent < back || e.Sent > f.to {
				continue
			}
			if e.Sent-last > gap {
				gap, at = e.Sent-last, last
			}
			last = e.Sent
		}
		if f.to-last > gap {
			gap, at = f.to-last, last
		}
		if gap > bound {
			c.violate(InvLogStall, at, "", r.name, time.Duration(gap-bound),
				"with its log stalled and the store answering, %s made no store call of its rounds for %v (bound %v)",
				r.name, time.Duration(gap).Round(time.Millisecond), time.Duration(bound))
		}
	}
}
