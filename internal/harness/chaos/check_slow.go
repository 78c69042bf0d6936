package chaos

import (
	"slices"
	"time"
)

// InvStarved: a store that answers every call, only slowly, must not cost
// a holder its work. The deadline is there for a store that does not
// answer; one that answers within the call timeout leaves the engine all
// it needs to renew in time, unless renewals wait behind other work.
const InvStarved = "slow store starves no renewal"

// SlowStore is what slow-store faults did to the holders they slowed.
type SlowStore struct {
	// Holders counts runner intervals of a slowed replica that overlapped a
	// slow-store window or the TTL after it.
	Holders int `json:"holders"`
	// DeadlineStops counts those that stopped at their deadline within it;
	// Excused those of them during which a store call of their replica
	// failed or took longer than the call timeout (the deadline did its
	// job), or their replica was frozen or under another fault.
	DeadlineStops int `json:"deadline_stops"`
	Excused       int `json:"excused"`
	// Calls counts the slowed replicas' store calls during the windows;
	// Slowest is the slowest of them that answered.
	Calls   int           `json:"calls"`
	Slowest time.Duration `json:"slowest"`
	// RenewalGap is the longest time between the sends of two successive
	// renewals (or grant and renewal) of a held term on a slowed replica,
	// up to its deadline stop: more than RenewEvery + CallTimeout means
	// renewals waited behind other calls, whether or not a deadline was
	// reached.
	RenewalGap time.Duration `json:"renewal_gap"`
}

// slowStores: during a slow-store window and one TTL after it, a runner
// of a slowed replica that stops at its deadline, although every store
// call its replica made since its last confirmed renewal answered within
// the call timeout, was starved: its renewals were not sent in time.
func (c *checker) slowStores() {
	ct := c.t.CallTimeout
	st := &c.rep.SlowStore
	for _, f := range c.m.faults {
		if f.kind != FaultSlowStore {
			continue
		}
		until := f.to + int64(c.t.TTL)
		for _, r := range c.m.replicas {
			if !f.involves(r) {
				continue
			}
			for _, e := range r.calls {
				if e.Sent >= f.from && e.Sent <= f.to {
					st.Calls++
					if answered(e) {
						st.Slowest = max(st.Slowest, time.Duration(e.T-e.Sent))
					}
				}
			}
		}
		for key, ivs := range c.m.intervals {
			for _, iv := range ivs {
				if !f.involves(iv.r) || iv.end < f.from || iv.start > until {
					continue
				}
				c.checked(InvStarved, 1)
				st.Holders++
				st.RenewalGap = max(st.RenewalGap, iv.r.renewalGap(iv, f.from, until))
				if !iv.stopped || iv.cause != causeDeadline || iv.end < f.from || iv.end > until {
					continue
				}
				st.DeadlineStops++
				from := iv.r.lastConfirmed(key, iv.epoch, iv.end, c.t)
				if from == 0 {
					from = iv.start
				}
				if iv.r.pausedDuring(from, iv.end) || c.otherFaultOn(iv.r, f, from, iv.end) {
					st.Excused++
					continue
				}
				n, ok := 0, true
				for _, e := range iv.r.calls {
					if e.Sent > iv.end || e.T < from {
						continue
					}
					n++
					ok = ok && answered(e) && time.Duration(e.T-e.Sent) <= ct
				}
				if !ok {
					st.Excused++
					continue
				}
				gap := time.Duration(iv.r.nextRenewal(key, from, iv.end) - from)
				c.violate(InvStarved, iv.end, key, iv.r.name, gap,
					"renewals starved by a slow store: %s stopped epoch %d at its deadline although all %d of its store calls since its last confirmed renewal answered within the call timeout (%v); the next renewal was sent %v after that one (renew every %v)",
					iv.r.name, iv.epoch, n, ct, gap.Round(time.Millisecond), c.t.RenewEvery)
			}
		}
	}
}

// answered reports whether a store call got its reply.
func answered(e Event) bool { return e.Outcome != outError && e.Outcome != outCommit }

// lastConfirmed is the send time of r's last grant or renewal of (key,
// epoch) that was in force at the moment by: what the deadline that
// stopped the runner was counted from. A confirmation that arrived after
// the stop point it would have moved (send time of the one in force + TTL
// - RenewEvery) came too late to count, even if it arrived before the
// stop was recorded.
func (r *replicaInfo) lastConfirmed(key string, epoch, by int64, t Timing) int64 {
	var cur int64
	for _, e := range r.calls {
		if e.T > by {
			break
		}
		confirmed := e.Ev == evAcquire && e.Key == key && e.Epoch == epoch && e.Outcome == outOK
		if e.Ev == evRenew {
			for _, it := range e.Items {
				confirmed = confirmed || it.Key == key && it.Epoch == epoch && it.OK
			}
		}
		if !confirmed {
			continue
		}
		if cur != 0 && e.T > cur+int64(t.TTL-t.RenewEvery) {
			break
		}
		if e.Ev == evAcquire {
			cur = max(cur, e.from())
		} else {
			cur = max(cur, e.Sent)
		}
	}
	return cur
}

// nextRenewal is when r next sent a renewal of key after from, or until
// when none was sent.
func (r *replicaInfo) nextRenewal(key string, from, until int64) int64 {
	next := until
	for _, e := range r.calls {
		if e.Ev != evRenew || e.Sent <= from || e.Sent >= next {
			continue
		}
		for _, it := range e.Items {
			if it.Key == key {
				next = e.Sent
			}
		}
	}
	return next
}

// renewalGap is the longest time between successive sends of iv's grant
// and renewals within [from, to] (to its stop, if that was its deadline).
func (r *replicaInfo) renewalGap(iv *interval, from, to int64) time.Duration {
	var sends []int64
	for _, e := range r.calls {
		switch {
		case e.Sent > iv.end:
		case e.Ev == evAcquire && e.Key == iv.key && e.Epoch == iv.epoch && e.Outcome == outOK:
			sends = append(sends, e.Sent)
		case e.Ev == evRenew && slices.ContainsFunc(e.Items, func(it Item) bool { return it.Key == iv.key && it.Epoch == iv.epoch }):
			sends = append(sends, e.Sent)
		}
	}
	if iv.stopped && iv.cause == causeDeadline {
		sends = append(sends, iv.end)
	}
	slices.Sort(sends)
	var gap time.Duration
	for i := 1; i < len(sends); i++ {
		if sends[i] >= from && sends[i-1] <= to {
			gap = max(gap, time.Duration(sends[i]-sends[i-1]))
		}
	}
	return gap
}

// otherFaultOn reports whether a fault other than f involved r during
// [from, to].
func (c *checker) otherFaultOn(r *replicaInfo, f faultWindow, from, to int64) bool {
	for _, g := range c.m.faults {
		if g != f && g.involves(r) && g.from <= to && g.to >= from {
			return true
		}
	}
	return false
}
