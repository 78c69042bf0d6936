package chaos

import (
	"fmt"
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
