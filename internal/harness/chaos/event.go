package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Event kinds written by replicas.
const (
	evProc    = "proc"         // a replica's supervisor exists: its store owner id is known
	evAcquire = "acquire"      // a store Acquire call and its outcome
	evRenew   = "renew"        // a store Renew call and its per-term outcomes
	evRelease = "release"      // a store Release call, logged before it is sent
	evRelDone = "release.done" // the outcome of that Release call
	evList    = "list"         // a store List call and its outcome
	evAbandon = "abandon"      // a term left out of a renewal and answered lost (the abandon fault)
	evLogGate = "loggate"      // the replica's log sink stalled (out "closed") or resumed ("open")
	evStart   = "start"        // a runner started its work
	evBeat    = "beat"         // a runner is still working
	evStop    = "stop"         // a runner saw its context end and stopped working
	evWrite   = "write"        // a fenced write and whether the fence accepted it
	evExit    = "exit"         // a replica shut down gracefully
	// evChild is a replica's record of a key's work run as a child process
	// through a guard (see childwork.go): started, each deadline passed on
	// to the guard, and how the child ended.
	evChild = "child"
	// evWorkerExit is a child's last record, written as its process exits.
	evWorkerExit = "worker.exit"
)

// Event kinds written by the harness.
const (
	evSpawn      = "spawn"       // a replica process started
	evExited     = "exited"      // a replica process is gone (reaped)
	evFaultBegin = "fault.begin" // a fault began
	evFaultEnd   = "fault.end"   // a fault ended
	evRunBegin   = "run.begin"   // every key had a holder; faults start
	evRunEnd     = "run.end"     // faults stop; replicas are shut down
	evDiag       = "diag"        // a replica printed a panic or data race
)

// Outcomes of store calls and fenced writes.
const (
	outOK       = "ok"       // the store answered (acquire: granted)
	outHeld     = "held"     // acquire: a peer holds the key
	outError    = "error"    // the call failed: its effect is unknown
	outCommit   = "commit"   // the call committed but its reply was held back
	outAccepted = "accepted" // the fence let the write commit
	outRejected = "rejected" // the fence refused a stale epoch
)

// Event is one record of a history, stamped with the host's
// CLOCK_MONOTONIC in nanoseconds, which all processes on the host share.
type Event struct {
	T int64 `json:"t"`
	// Replica is the process that wrote the record; empty for the harness.
	Replica string `json:"r,omitempty"`
	Ev      string `json:"ev"`
	Key     string `json:"key,omitempty"`
	Epoch   int64  `json:"epoch,omitempty"`
	// Owner is the owner id the store sees (Supervisor.Owner), which need
	// not be the configured name: the harness and the checker tell
	// processes apart by replica name and this id, never by Configured.
	Owner string `json:"owner,omitempty"`
	// Configured is the replica's Config.Owner, a human name that two
	// processes may share (the same-owner fault).
	Configured string `json:"cfg,omitempty"`
	// PID is a process: the replica's (proc, spawn, exited), or, on a
	// runner's start, beat, stop and write records and on evChild, the
	// child process that did the work for the replica named in Replica,
	// its wrapper. Work in the replica's own process has none.
	PID int `json:"pid,omitempty"`
	// Deadline is the safety deadline a child's guard enforces (evChild),
	// on the shared clock.
	Deadline int64 `json:"deadline,omitempty"`
	// Wall is CLOCK_REALTIME (ns since the epoch) read next to T, on
	// run.begin and run.end: the rate of the wall clock, which the SQL
	// stores and Redis stamp expiries with, against CLOCK_MONOTONIC.
	Wall int64 `json:"wall,omitempty"`
	// Sent is when a store call or a fenced transaction began.
	Sent int64 `json:"sent,omitempty"`
	// Dated is when a granted term is counted from, when the store dated
	// it before Sent (store.AcquireResult.Elapsed); see from.
	Dated   int64  `json:"dated,omitempty"`
	Outcome string `json:"out,omitempty"`
	// Cause is why a runner stopped: deadline, lost, stopping, …
	Cause string `json:"cause,omitempty"`
	// Seq numbers accepted writes per key, in commit order (the resource
	// row's counter, advanced inside the fenced transaction).
	Seq int64 `json:"seq,omitempty"`
	// Prev is the epoch of the resource row before an accepted write.
	Prev int64 `json:"prev,omitempty"`
	// Cur is the fence's epoch that refused a write.
	Cur    int64  `json:"cur,omitempty"`
	Fault  string `json:"fault,omitempty"`
	Target string `json:"target,omitempty"` // a replica name, or "*"
	// Peer is the second process of a two-process fault: the extra
	// replica started with the target's owner name (same-owner).
	Peer string `json:"peer,omitempty"`
	Dur  int64  `json:"dur,omitempty"` // ns: a fault's planned length or added latency
	// Left is, on a refused Acquire, the time the store said the
	// holder's term had left (ns; negative within its grace).
	Left int64 `json:"left,omitempty"`
	// Latency is a slow-store fault's round-trip latency (ns).
	Latency int64  `json:"latency,omitempty"`
	Err     string `json:"err,omitempty"`
	Items   []Item `json:"items,omitempty"`
}

// Item is one term of a batched Renew or Release.
type Item struct {
	Key   string `json:"key"`
	Epoch int64  `json:"epoch"`
	OK    bool   `json:"ok,omitempty"`
}

// eventLog appends events to a file, one JSON line per write(2) on a file
// opened O_APPEND: a process killed at any moment leaves every line it
// finished writing, and lines of concurrent writers never interleave.
type eventLog struct {
	who string
	mu  sync.Mutex
	f   *os.File
}

func openLog(path, who string) (*eventLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("chaos: open log: %w", err)
	}
	return &eventLog{who: who, f: f}, nil
}

// add stamps e (unless it carries a time) and appends it. A failed write
// is ignored: the run goes on, and a missing record can only make the
// checker see less, never invent a violation from nothing.
func (l *eventLog) add(e Event) {
	if e.T == 0 {
		e.T = Now()
	}
	if e.Replica == "" {
		e.Replica = l.who
	}
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_, _ = l.f.Write(b)
	}
}

func (l *eventLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// readLog reads one log file. A last line cut short (a writer killed
// mid-write on a file system without atomic appends) is dropped.
func readLog(path string) ([]Event, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: read log: %w", err)
	}
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			if !bytes.HasSuffix(data, []byte("\n")) && !sc.Scan() {
				break // the torn last line
			}
			return nil, fmt.Errorf("chaos: %s line %d: %w", path, line, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// clockEvent is a harness record of kind ev carrying both clocks, read one
// after the other.
func clockEvent(ev string) Event {
	return Event{Ev: ev, T: Now(), Wall: time.Now().UnixNano()}
}

// from is when an acquisition's term is counted from: the call's start, or
// earlier when the store dated the term back.
func (e Event) from() int64 {
	if e.Dated != 0 {
		return e.Dated
	}
	return e.Sent
}
