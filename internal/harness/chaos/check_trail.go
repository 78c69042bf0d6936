package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// maxTrail caps how many calls a trail names: enough to see a peer's
// retries over a few TTLs, short enough for a report.
const maxTrail = 12

// trail tells what the peers of r did about key from from on, up to the
// run that came late (at): each Acquire they sent — refused with the
// time the store said the holder's term had left, granted, failed — and
// when that run started. A late takeover is then told apart at a glance:
// a store that kept the key (refusals with time left), a peer that did
// not ask (a gap between calls), a call that failed, or a run that
// started well after its grant (a starved process).
func (c *checker) trail(key string, r *replicaInfo, from, at int64) string {
	var calls []Event
	for _, p := range c.m.replicas {
		if p == r {
			continue
		}
		for _, e := range p.calls {
			if e.Ev == evAcquire && e.Key == key && e.Sent >= from && e.Sent <= at {
				calls = append(calls, e)
			}
		}
	}
	slices.SortFunc(calls, func(a, b Event) int { return cmp.Compare(a.Sent, b.Sent) })
	var b strings.Builder
	b.WriteString("; peers' acquisitions after it:")
	if len(calls) == 0 {
		b.WriteString(" none")
	}
	if len(calls) > maxTrail {
		fmt.Fprintf(&b, " (the last %d of %d)", maxTrail, len(calls))
		calls = calls[len(calls)-maxTrail:]
	}
	rel := func(t int64) time.Duration { return time.Duration(t - from).Round(time.Millisecond) }
	for _, e := range calls {
		fmt.Fprintf(&b, " %s +%v %s", e.Replica, rel(e.Sent), e.Outcome)
		switch e.Outcome {
		case outHeld:
			fmt.Fprintf(&b, " (left %v)", time.Duration(e.Left).Round(time.Millisecond))
		case outOK:
			fmt.Fprintf(&b, " (answered +%v)", rel(e.T))
		}
	}
	fmt.Fprintf(&b, "; run started +%v", rel(at))
	return b.String()
}
