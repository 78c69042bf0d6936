package chaos

import (
	"slices"
	"time"
)

// This file turns a history's events into what the checks reason about:
// replica processes with their pauses and deaths, runner intervals, terms,
// and fault windows.

type span struct{ from, to int64 }

// replicaInfo is one replica process. Processes are told apart by name:
// two may share an owner name (configured), and, on an engine that does
// not make owner ids unique per process, a store owner id too.
type replicaInfo struct {
	name       string
	owner      string // the owner id the store saw (Supervisor.Owner)
	configured string // its Config.Owner
	spawned    int64  // when the harness started it
	exit       int64  // when the harness reaped it; 0 while alive
	killed     bool
	pauses     []span  // recorded inside the real pauses
	stalls     []span  // its log sink blocked (its own records)
	calls      []Event // its store calls that returned, in reply order
}

// interval is one run of one runner: from its start record to its stop
// record, or, without one, to its process's death (or the end of the
// history).
type interval struct {
	r          *replicaInfo
	key        string
	epoch      int64
	start, end int64
	cause      string // the stop's cause, or "killed", "exited", "open"
	stopped    bool   // ended by its own stop record
	// pid is the child process that did the work for r, its wrapper; 0
	// for work in r's own process (see check_child.go).
	pid int
	// deadlines are a child's guard deadlines: from when each was passed
	// on (from) and the instant itself (to).
	deadlines []span
	gone      int64 // a child's last record, as its process exited
}

// term is what the store calls tell about one epoch of one key.
type term struct {
	key           string
	epoch         int64
	owner         string // the store's owner id
	replica       string // the process granted it
	granted       int64  // reply time of the Acquire that started it (0: unseen)
	lastConfirmed int64  // send time of the last confirmed grant or renewal
	lastListed    int64  // send time of the last grant or renewal call that named it, answered or not
	renewed       bool   // a renewal of it was confirmed
	released      bool   // a Release of it was attempted (it may have committed)
	releaseSent   int64  // when the first was sent
}

// faultWindow is a fault from its start to its end (for a kill or a
// restart: until the process was gone).
type faultWindow struct {
	kind, target string
	peer         string // same-owner: the extra replica
	key          string // abandon: the key left out
	from, to     int64
	latency      int64 // slow-store: added round trip (ns)
}

// involves reports whether the fault was aimed at r (or at every replica).
func (f faultWindow) involves(r *replicaInfo) bool {
	return f.target == "*" || f.target == r.name || f.peer == r.name
}

// model is a history digested.
type model struct {
	h          *History
	begin, end int64 // run.begin and run.end (or the first and last event)
	// wallRate is how much faster than CLOCK_MONOTONIC the host's wall
	// clock ran from run.begin to run.end (0.001 = 1,000 ppm fast).
	wallRate  float64
	replicas  map[string]*replicaInfo
	intervals map[string][]*interval // by key, ordered by start
	terms     map[string][]*term     // by key, ordered by epoch
	faults    []faultWindow
	writes    map[string][]Event // fenced writes by key
	acquires  map[string][]Event // granted acquisitions by key
	abandons  []Event            // terms the abandon fault left out of a renewal
	crashes   []Event            // unexpected exits and diagnostics
	counts    map[string]int     // events by kind
	children  map[childID]*interval
}

func buildModel(h *History) *model {
	m := &model{h: h, replicas: map[string]*replicaInfo{},
		intervals: map[string][]*interval{}, terms: map[string][]*term{}, writes: map[string][]Event{},
		acquires: map[string][]Event{}, counts: map[string]int{}, children: map[childID]*interval{}}
	if len(h.Events) > 0 {
		m.begin, m.end = h.Events[0].T, h.Events[len(h.Events)-1].T
	}
	open := map[*replicaInfo]map[string]*interval{}
	openFault := map[string]int{} // kind/target → index in m.faults
	termOf := map[string]map[int64]*term{}
	getTerm := func(key string, epoch int64) *term {
		if termOf[key] == nil {
			termOf[key] = map[int64]*term{}
		}
		t := termOf[key][epoch]
		if t == nil {
			t = &term{key: key, epoch: epoch}
			termOf[key][epoch] = t
		}
		return t
	}
	replica := func(name string) *replicaInfo {
		r := m.replicas[name]
		if r == nil {
			r = &replicaInfo{name: name}
			m.replicas[name] = r
		}
		return r
	}
	closeAll := func(r *replicaInfo, at int64, cause string) {
		for key, iv := range open[r] {
			iv.end, iv.cause = at, cause
			delete(open[r], key)
		}
	}
	sawEnd := false
	var wallBegin int64
	for _, e := range h.Events {
		m.counts[e.Ev]++
		if m.childRecord(e) {
			continue
		}
		switch e.Ev {
		case evRunBegin:
			m.begin, wallBegin = e.T, e.Wall
		case evRunEnd:
			m.end, sawEnd = e.T, true
			if wallBegin != 0 && e.Wall != 0 && e.T > m.begin {
				m.wallRate = float64(e.Wall-wallBegin)/float64(e.T-m.begin) - 1
			}
		case evSpawn:
			r := replica(e.Target)
			r.spawned = e.T
			r.configured = e.Configured
			if e.Owner != "" && r.owner == "" { // a history from before proc records carried the id
				r.owner = e.Owner
			}
		case evProc:
			// The supervisor's own id, whatever it was configured with.
			r := replica(e.Replica)
			r.owner = e.Owner
			if e.Configured != "" {
				r.configured = e.Configured
			}
		case evLogGate:
			r := replica(e.Replica)
			if e.Outcome == "closed" {
				r.stalls = append(r.stalls, span{e.T, -1})
			} else if n := len(r.stalls); n > 0 && r.stalls[n-1].to < 0 {
				r.stalls[n-1].to = e.T
			}
		case evExited:
			r := replica(e.Target)
			r.exit = e.T
			cause := "exited"
			if r.killed {
				cause = causeKilled
			}
			closeAll(r, e.T, cause)
			m.orphan(r, e.T, cause)
			if n := len(r.stalls); n > 0 && r.stalls[n-1].to < 0 {
				r.stalls[n-1].to = e.T
			}
			if e.Outcome == "unexpected" {
				m.crashes = append(m.crashes, e)
			}
		case evDiag:
			m.crashes = append(m.crashes, e)
		case evFaultBegin:
			if e.Fault == FaultKill {
				replica(e.Target).killed = true
			}
			openFault[e.Fault+"/"+e.Target] = len(m.faults)
			m.faults = append(m.faults, faultWindow{kind: e.Fault, target: e.Target, peer: e.Peer, key: e.Key, from: e.T, to: -1,
				latency: e.Latency})
		case evFaultEnd:
			if i, ok := openFault[e.Fault+"/"+e.Target]; ok {
				m.faults[i].to = e.T
				delete(openFault, e.Fault+"/"+e.Target)
				if e.Fault == FaultPause || e.Fault == FaultFreezeWrapper {
					r := replica(e.Target)
					r.pauses = append(r.pauses, span{m.faults[i].from, e.T})
				}
			}
		case evStart:
			r := replica(e.Replica)
			if open[r] == nil {
				open[r] = map[string]*interval{}
			}
			if prev := open[r][e.Key]; prev != nil { // a start without a stop: should not happen
				prev.end, prev.cause = e.T, "restarted"
			}
			iv := &interval{r: r, key: e.Key, epoch: e.Epoch, start: e.T, end: -1}
			open[r][e.Key] = iv
			m.intervals[e.Key] = append(m.intervals[e.Key], iv)
		case evStop:
			r := replica(e.Replica)
			if iv := open[r][e.Key]; iv != nil {
				iv.end, iv.cause, iv.stopped = e.T, e.Cause, true
				delete(open[r], e.Key)
			}
		case evAcquire:
			replica(e.Replica).calls = append(replica(e.Replica).calls, e)
			if e.Epoch > 0 && (e.Outcome == outOK || e.Outcome == outCommit) {
				t := getTerm(e.Key, e.Epoch)
				t.owner, t.replica = replica(e.Replica).owner, e.Replica
				t.lastListed = max(t.lastListed, e.Sent)
				if e.Outcome == outOK {
					t.granted = e.T
					t.lastConfirmed = max(t.lastConfirmed, e.from())
					m.acquires[e.Key] = append(m.acquires[e.Key], e)
				}
			}
		case evList, evRelDone:
			replica(e.Replica).calls = append(replica(e.Replica).calls, e)
		case evRenew:
			replica(e.Replica).calls = append(replica(e.Replica).calls, e)
			for _, it := range e.Items {
				t := getTerm(it.Key, it.Epoch)
				t.lastListed = max(t.lastListed, e.Sent)
				if it.OK {
					t.lastConfirmed = max(t.lastConfirmed, e.Sent)
					t.renewed = true
				}
			}
		case evAbandon:
			m.abandons = append(m.abandons, e)
		case evRelease:
			for _, it := range e.Items {
				if t := getTerm(it.Key, it.Epoch); !t.released {
					t.released, t.releaseSent = true, e.Sent
				}
			}
		case evWrite:
			m.writes[e.Key] = append(m.writes[e.Key], e)
		}
	}
	last := m.end
	if !sawEnd && len(h.Events) > 0 {
		last = h.Events[len(h.Events)-1].T
	}
	for r := range open {
		closeAll(r, max(last, r.exit), "open")
	}
	m.orphan(nil, last, "open")
	for _, r := range m.replicas {
		if n := len(r.stalls); n > 0 && r.stalls[n-1].to < 0 {
			r.stalls[n-1].to = last
		}
	}
	for i := range m.faults {
		if m.faults[i].to < 0 {
			m.faults[i].to = last
		}
	}
	for key, byEpoch := range termOf {
		for _, t := range byEpoch {
			m.terms[key] = append(m.terms[key], t)
		}
		slices.SortFunc(m.terms[key], func(a, b *term) int { return compareInt(a.epoch, b.epoch) })
	}
	return m
}

// live returns the parts of [from, to] during which iv's work was not
// frozen.
func (iv *interval) live(from, to int64) []span {
	return cutSpans(span{from, to}, iv.pauses())
}

// pausedDuring reports whether r was frozen at any moment of [from, to].
func (r *replicaInfo) pausedDuring(from, to int64) bool {
	for _, p := range r.pauses {
		if p.from <= to && p.to >= from {
			return true
		}
	}
	return false
}

// faultNear reports whether any fault was active during [from, to].
func (m *model) faultNear(from, to int64) bool {
	for _, f := range m.faults {
		if f.from <= to && f.to >= from {
			return true
		}
	}
	return false
}

func (m *model) since(t int64) time.Duration { return time.Duration(t - m.begin) }
