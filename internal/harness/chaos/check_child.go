package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file is what the checker makes of work done in child processes
// (childwork.go). A child's records name its wrapper as their replica and
// carry its own pid. Its work is an interval like any runner's, with one
// difference: freezing the wrapper does not freeze the child, so none of
// the wrapper's pauses suspend or excuse it. Overlap, fencing, epoch and
// margin checks apply unchanged; the resume check, which is about frozen
// work, does not.

// childID tells one child's work apart from every other: pids are reused.
type childID struct {
	pid   int
	key   string
	epoch int64
}

// childRecord takes a record of child work into the model and reports
// whether it was one: the child's start, beats, stop and exit, and its
// wrapper's evChild records. Writes go with everyone's (the caller).
func (m *model) childRecord(e Event) bool {
	if e.PID == 0 || e.Replica == "" {
		return false
	}
	id := childID{e.PID, e.Key, e.Epoch}
	iv := m.children[id]
	switch e.Ev {
	case evStart:
		r := m.replicas[e.Replica]
		if r == nil {
			r = &replicaInfo{name: e.Replica}
			m.replicas[e.Replica] = r
		}
		iv = &interval{r: r, key: e.Key, epoch: e.Epoch, start: e.T, end: -1, pid: e.PID}
		if prev := m.children[id]; prev != nil { // the wrapper's started record came first
			iv.deadlines = prev.deadlines
		}
		m.children[id] = iv
		m.intervals[e.Key] = append(m.intervals[e.Key], iv)
	case evBeat:
		// A beat after the wrapper's death (which closed the interval)
		// is a child its guard failed to kill: its work goes on.
		if iv != nil && !iv.stopped && iv.end >= 0 && e.T > iv.end {
			iv.end = e.T
		}
	case evStop:
		if iv != nil {
			iv.end, iv.cause, iv.stopped = e.T, e.Cause, true
		}
	case evWorkerExit:
		if iv != nil {
			iv.gone = e.T
		}
	case evChild:
		if iv == nil { // the child has not recorded its start yet
			iv = &interval{end: -1}
			m.children[id] = iv
		}
		switch e.Outcome {
		case childStarted:
			// The guard had it before the child started, however late the
			// wrapper got to record it (it may be frozen right after Start).
			if e.Deadline != 0 {
				iv.deadlines = append(iv.deadlines, span{0, e.Deadline})
			}
		case childDeadline:
			iv.deadlines = append(iv.deadlines, span{e.T, e.Deadline})
		case childExited:
			// The wrapper knows why the child was stopped (the child only
			// that it got a SIGTERM): the guard's deadline, or the reason
			// the engine stopped the run. A child gone without its stop
			// record (SIGKILL) was gone by now.
			if iv.r != nil && !iv.stopped {
				iv.end, iv.stopped = e.T, true
			}
			iv.cause = e.Cause
			if e.Cause == "exited" {
				m.crashes = append(m.crashes, Event{T: e.T, Ev: evDiag, Target: e.Replica,
					Err: fmt.Sprintf("its child %d (%s epoch %d) ended on its own: %s", e.PID, e.Key, e.Epoch, e.Err)})
			}
		}
	default:
		return false
	}
	return true
}

// orphan ends, at at, the work of r's children (every replica's, for nil)
// that is still open: when its wrapper dies, its guard kills the child
// within milliseconds. A child that goes on working leaves beats, which
// extend its interval (childRecord).
func (m *model) orphan(r *replicaInfo, at int64, cause string) {
	for _, iv := range m.children {
		if iv.r == nil || iv.end >= 0 || r != nil && iv.r != r {
			continue
		}
		iv.end, iv.cause = at, cause
		if r == nil {
			iv.end = max(at, iv.r.exit)
		}
	}
}

// pauses are the stretches during which iv's work was frozen: its
// replica's pauses, for work in the replica's own process; none for a
// child's, which runs on while its wrapper is frozen.
// ended: the run ended at iv.end for sure — its own stop record, or, for
// a runner inside the replica's process, that process killed (a child's
// work may outlive its wrapper and is judged apart).
func (iv *interval) ended() bool {
	return iv.stopped || iv.pid == 0 && iv.cause == causeKilled
}

func (iv *interval) pauses() []span {
	if iv.pid != 0 {
		return nil
	}
	return iv.r.pauses
}

// who names the process that did iv's work: its replica, or the
// replica's child.
func (iv *interval) who() string {
	if iv.pid != 0 {
		return fmt.Sprintf("%s's child %d", iv.r.name, iv.pid)
	}
	return iv.r.name
}

// frozenDuring reports whether iv's work was frozen at any moment of
// [from, to].
func (iv *interval) frozenDuring(from, to int64) bool {
	for _, p := range iv.pauses() {
		if p.from <= to && p.to >= from {
			return true
		}
	}
	return false
}

// enforcedAt is the deadline iv's guard had at the moment at: the last
// one passed on by then (0: none).
func (iv *interval) enforcedAt(at int64) int64 {
	var d int64
	for _, s := range iv.deadlines {
		if s.from <= at {
			d = s.to
		}
	}
	return d
}

// WrapperFreezes is what freeze-wrapper faults did to the child work of
// the replicas they froze.
type WrapperFreezes struct {
	N int `json:"n"`
	// Children counts child work that ran while its wrapper was frozen;
	// GuardStops those of them that ended while it was still frozen
	// (nothing but the guard could stop them), and PastDeadline those
	// still running when it resumed although the deadline their guard
	// had been given had passed (a guard that did not enforce it; a child
	// started without a deadline has none to pass).
	Children     int `json:"children"`
	GuardStops   int `json:"guard_stops"`
	PastDeadline int `json:"past_deadline"`
	// TakenOver counts those whose key a peer started while the wrapper
	// was frozen.
	TakenOver int `json:"taken_over"`
	// AfterDeadline is the time from the deadline the guard had to the
	// child's stop record, for the guard's stops; Gone is the longest
	// from that deadline to the child's exit (it finishes a write it had
	// decided on, which the fence orders).
	AfterDeadline Latency       `json:"after_deadline"`
	Gone          time.Duration `json:"gone"`
}

// guardMark is the deadline a child's guard had when its wrapper froze,
// for the timeline.
type guardMark struct {
	key string
	at  int64
}

// wrapperFreezes measures freeze-wrapper faults for the report and the
// timeline.
func (m *model) wrapperFreezes() (WrapperFreezes, []guardMark) {
	var w WrapperFreezes
	var marks []guardMark
	var after []time.Duration
	for _, f := range m.faults {
		if f.kind != FaultFreezeWrapper {
			continue
		}
		w.N++
		for key, ivs := range m.intervals {
			for _, iv := range ivs {
				if iv.pid == 0 || iv.r.name != f.target || iv.start >= f.to || iv.end <= f.from {
					continue
				}
				w.Children++
				deadline := iv.enforcedAt(f.from)
				if deadline != 0 {
					marks = append(marks, guardMark{key, deadline})
				}
				if slices.ContainsFunc(ivs, func(o *interval) bool { return o.r != iv.r && o.start >= f.from && o.start <= f.to }) {
					w.TakenOver++
				}
				switch {
				case iv.end <= f.to:
					w.GuardStops++
					if deadline != 0 {
						after = append(after, time.Duration(iv.end-deadline))
						if iv.gone != 0 {
							w.Gone = max(w.Gone, time.Duration(iv.gone-deadline))
						}
					}
				case deadline != 0 && deadline < f.to:
					w.PastDeadline++
				}
			}
		}
	}
	w.AfterDeadline.set(after)
	return w, marks
}

// write is the report's paragraph on them.
func (w WrapperFreezes) write(b *strings.Builder) {
	fmt.Fprintf(b, "frozen wrappers       %d freezes with %d children running: %d stopped by their guard while frozen, %d ran on past their deadline; %d taken over meanwhile\n",
		w.N, w.Children, w.GuardStops, w.PastDeadline, w.TakenOver)
	if a := w.AfterDeadline; a.N > 0 {
		us := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
		fmt.Fprintf(b, "                      children stopped after their guard's deadline: p50 %v, max %v over %d; gone at most %v after it\n",
			us(a.P50), us(a.Max), a.N, w.Gone.Round(time.Millisecond))
	}
}
