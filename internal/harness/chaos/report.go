package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of a run (or of checking a saved history).
type Report struct {
	Store    string        `json:"store"` // redacted
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration"` // from the first fault to the last
	Replicas int           `json:"replicas"`
	Keys     int           `json:"keys"`
	PoolKeys int           `json:"pool_keys,omitempty"`
	// PoolChecked is how much of the run the pool check applied to:
	// outside the faults that stop work and a pool bound after each.
	PoolChecked time.Duration `json:"pool_checked,omitempty"`
	Timing      Timing        `json:"timing"`

	Ops Ops `json:"ops"`
	// WallClockPPM is how much faster than CLOCK_MONOTONIC this host's
	// wall clock ran over the run, in parts per million: the rate at which
	// stores stamping expiries with a wall clock shorten leases.
	WallClockPPM float64 `json:"wall_clock_ppm"`
	// Transitions counts changes of the replica running a key; Terms the
	// runner starts with a new epoch.
	Transitions int            `json:"transitions"`
	Terms       int            `json:"terms"`
	Faults      map[string]int `json:"faults"`
	// Kinds are the fault kinds the schedule drew from.
	Kinds []string `json:"kinds,omitempty"`

	Invariants []InvariantResult `json:"invariants"`
	Violations []Violation       `json:"violations"`

	// Takeover is the time from a holder's kill to its key running on
	// another replica.
	Takeover Latency `json:"takeover"`
	// Abandoned is what the abandon faults showed (check_abandon.go).
	Abandoned Abandoned `json:"abandoned"`
	// Handoff is the time from a graceful restart's SIGTERM to the key
	// running on another replica (the runner winds down first).
	Handoff Latency `json:"handoff"`
	// ResumeStop is the time from SIGCONT to the stop of a runner whose
	// term ran out while its process was frozen.
	ResumeStop Latency `json:"resume_stop"`
	// PauseOverlaps counts successions where a frozen holder's runner
	// was still running for a moment after it resumed, while its
	// successor already ran (within ResumeBound: the documented limit of
	// timing alone, which the fence covers).
	PauseOverlaps     int           `json:"pause_overlaps"`
	WorstPauseOverlap time.Duration `json:"worst_pause_overlap"`
	// Margin is how long before its successor's start a runner stopped
	// for lack of renewals stopped.
	Margin Margin `json:"margin"`
	// NoHolder is the key-time during which no runner ran, summed over
	// keys; NoHolderShare is it as a share of keys × Duration.
	NoHolder      time.Duration `json:"no_holder"`
	NoHolderShare float64       `json:"no_holder_share"`
	// FalseStepDowns are runners that stopped for lack of renewals, or
	// because the store refused one, with no fault anywhere near.
	FalseStepDowns []StepDown `json:"false_step_downs"`
	// SlowStore is what slow-store faults did to the holders they slowed.
	SlowStore SlowStore `json:"slow_store"`
	// LogStalls counts log-stall faults, Blips those with a partition
	// inside, and LongestStall is the longest a replica's log sink was
	// recorded blocked.
	LogStalls    int           `json:"log_stalls"`
	Blips        int           `json:"blips"`
	LongestStall time.Duration `json:"longest_stall"`
	// SameOwners counts same-owner faults; SharedIDs those in which the
	// store saw the two processes as one owner id (an engine whose owner
	// ids are the configured names).
	SameOwners int `json:"same_owners"`
	SharedIDs  int `json:"shared_ids"`
	// WrapperFreezes is what freeze-wrapper faults did to child work.
	WrapperFreezes WrapperFreezes `json:"wrapper_freezes"`

	// HistoryDir holds the history when it was kept (a failed run, or
	// Options.HistoryDir). Replay with the same seed.
	HistoryDir string `json:"history_dir,omitempty"`
	// History is what was checked, for WriteTimeline.
	History *History `json:"-"`
}

// Ops counts what the replicas did.
type Ops struct {
	Acquires, Renewals, Releases, StoreErrors int
	Starts                                    int
	Writes, Accepted, Rejected, WriteErrors   int
}

// InvariantResult is one invariant's verdict.
type InvariantResult struct {
	Name       string        `json:"name"`
	Checked    int           `json:"checked"` // cases examined
	Violations int           `json:"violations"`
	Worst      time.Duration `json:"worst,omitempty"` // largest overlap, delay or shortfall
}

// Violation is one breach of an invariant.
type Violation struct {
	Invariant string        `json:"invariant"`
	At        time.Duration `json:"at"` // since faults began
	Key       string        `json:"key,omitempty"`
	Replica   string        `json:"replica,omitempty"`
	Amount    time.Duration `json:"amount,omitempty"`
	Detail    string        `json:"detail"`
}

// Latency summarises a set of durations against a bound.
type Latency struct {
	N     int           `json:"n"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	Max   time.Duration `json:"max"`
	Bound time.Duration `json:"bound,omitempty"`
}

func (l *Latency) set(ds []time.Duration) {
	l.N = len(ds)
	if l.N == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	l.P50, l.P99, l.Max = at(0.5), at(0.99), s[len(s)-1]
}

// Margin is the smallest fail-closed margin seen against the promise.
type Margin struct {
	N        int           `json:"n"`
	Min      time.Duration `json:"min"`
	Promised time.Duration `json:"promised"`
}

// StepDown is a runner that stopped with no fault to explain it.
type StepDown struct {
	At      time.Duration `json:"at"`
	Replica string        `json:"replica"`
	Key     string        `json:"key"`
	Epoch   int64         `json:"epoch"`
	Cause   string        `json:"cause"`
}

// OK reports whether no invariant was violated.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// measure fills the report's figures.
func (c *checker) measure() {
	m, rep := c.m, c.rep
	for _, f := range m.faults {
		rep.Faults[f.kind]++
		switch f.kind {
		case FaultLogStall:
			rep.LogStalls++
			if slices.ContainsFunc(m.faults, func(g faultWindow) bool {
				return g.kind == FaultPartition && g.target == f.target && g.from >= f.from && g.to <= f.to
			}) {
				rep.Blips++
			}
		case FaultSameOwner:
			rep.SameOwners++
			if a, b := m.replicas[f.target], m.replicas[f.peer]; a != nil && b != nil && a.owner != "" && a.owner == b.owner {
				rep.SharedIDs++
			}
		}
	}
	rep.WrapperFreezes, _ = m.wrapperFreezes()
	for _, r := range m.replicas {
		for _, st := range r.stalls {
			rep.LongestStall = max(rep.LongestStall, time.Duration(st.to-st.from))
		}
	}
	for _, e := range m.h.Events {
		switch e.Ev {
		case evAcquire:
			rep.Ops.Acquires++
		case evRenew:
			rep.Ops.Renewals++
		case evRelease:
			rep.Ops.Releases++
		case evStart:
			rep.Ops.Starts++
		case evWrite:
			rep.Ops.Writes++
			switch e.Outcome {
			case outAccepted:
				rep.Ops.Accepted++
			case outRejected:
				rep.Ops.Rejected++
			default:
				rep.Ops.WriteErrors++
			}
		}
		if (e.Ev == evAcquire || e.Ev == evRenew) && (e.Outcome == outError || e.Outcome == outCommit) {
			rep.Ops.StoreErrors++
		}
	}
	window := m.end - m.begin
	quiet := c.t.TTL + c.t.Grace + c.t.RenewEvery
	var handoffs []time.Duration
	for key, ivs := range m.intervals {
		if isPoolKey(key) {
			continue // the figures are the singletons'; InvPoolRuns checks the pool's
		}
		covered, cur := int64(0), m.begin
		var prev *interval
		for _, iv := range ivs {
			if prev != nil && prev.r != iv.r {
				rep.Transitions++
			}
			if prev == nil || iv.epoch != prev.epoch {
				rep.Terms++
			}
			prev = iv
			from, to := max(iv.start, cur), min(iv.end, m.end)
			if to > from {
				covered += to - from
				cur = to
			}
			if iv.stopped && (iv.cause == causeDeadline || iv.cause == causeLost) &&
				!m.faultNear(iv.end-int64(quiet), iv.end) {
				rep.FalseStepDowns = append(rep.FalseStepDowns, StepDown{At: m.since(iv.end), Replica: iv.r.name,
					Key: key, Epoch: iv.epoch, Cause: iv.cause})
			}
		}
		if window > 0 {
			rep.NoHolder += time.Duration(window - covered)
		}
		for _, f := range m.faults {
			if f.kind != FaultRestart {
				continue
			}
			r := m.replicas[f.target]
			if !slices.ContainsFunc(ivs, func(iv *interval) bool { return iv.r == r && iv.start <= f.from && iv.end >= f.from }) {
				continue
			}
			if next := slices.IndexFunc(ivs, func(iv *interval) bool { return iv.r != r && iv.start >= f.from }); next >= 0 {
				handoffs = append(handoffs, time.Duration(ivs[next].start-f.from))
			}
		}
	}
	rep.Handoff.set(handoffs)
	if window > 0 && rep.Keys > 0 {
		rep.NoHolderShare = float64(rep.NoHolder) / float64(window*int64(rep.Keys))
	}
	slices.SortFunc(rep.FalseStepDowns, func(a, b StepDown) int { return compareInt(int64(a.At), int64(b.At)) })
}

// WriteText renders the report for people.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = fmt.Sprintf("FAIL (%d violations)", len(r.Violations))
	}
	fmt.Fprintf(&b, "tenure verify: %s\n", verdict)
	fmt.Fprintf(&b, "store      %s\n", r.Store)
	fmt.Fprintf(&b, "seed       %d (replay: --seed %d)\n", r.Seed, r.Seed)
	fmt.Fprintf(&b, "run        %v of faults, %d replicas × %d keys", r.Duration.Round(time.Second), r.Replicas, r.Keys)
	if r.PoolKeys > 0 {
		fmt.Fprintf(&b, ", and %d keys in a pool", r.PoolKeys)
	}
	b.WriteString("\n")
	t := r.Timing
	fmt.Fprintf(&b, "timing     TTL %v, grace %v, renew every %v, call timeout %v\n", t.TTL, t.Grace, t.RenewEvery, t.CallTimeout)
	fmt.Fprintf(&b, "clocks     this host's wall clock ran %+.0f ppm against CLOCK_MONOTONIC\n", r.WallClockPPM)
	o := r.Ops
	fmt.Fprintf(&b, "operations %d acquisitions, %d renewals, %d releases (%d store calls failed or lost their reply)\n",
		o.Acquires, o.Renewals, o.Releases, o.StoreErrors)
	fmt.Fprintf(&b, "           %d runner starts; %d fenced writes: %d accepted, %d stale refused, %d failed\n",
		o.Starts, o.Writes, o.Accepted, o.Rejected, o.WriteErrors)
	fmt.Fprintf(&b, "ownership  %d transitions, %d terms; no holder %v of key-time (%.1f%%)\n",
		r.Transitions, r.Terms, r.NoHolder.Round(time.Millisecond), 100*r.NoHolderShare)
	var faults []string
	for _, k := range FaultKinds {
		if n := r.Faults[k]; n > 0 {
			faults = append(faults, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(&b, "faults     %s\n", orNone(strings.Join(faults, ", ")))
	// The default is every kind but store-restart, and source-down without
	// a pool.
	defaults := len(FaultKinds) - 1
	if r.PoolKeys == 0 {
		defaults--
	}
	if len(r.Kinds) > 0 && len(r.Kinds) < defaults {
		fmt.Fprintf(&b, "           drawn from %s only\n", strings.Join(r.Kinds, ", "))
	}
	if r.PoolKeys > 0 {
		fmt.Fprintf(&b, "pool coverage checked over %v of %v (the rest within a fault that stops work, or a bound after it)\n",
			r.PoolChecked.Round(time.Second), r.Duration.Round(time.Second))
	}
	fmt.Fprintf(&b, "takeover after kill   %s\n", r.Takeover)
	fmt.Fprintf(&b, "handoff on restart    %s\n", r.Handoff)
	fmt.Fprintf(&b, "run after abandon     %s; %d renewed before, %d not checked\n",
		r.Abandoned.Latency, r.Abandoned.Renewed, r.Abandoned.Excused)
	fmt.Fprintf(&b, "stop after SIGCONT    %s\n", r.ResumeStop)
	fmt.Fprintf(&b, "frozen-holder overlaps %d, worst %v (the limit of timing alone; fencing orders their writes)\n",
		r.PauseOverlaps, r.WorstPauseOverlap.Round(time.Millisecond))
	if r.Margin.N > 0 {
		fmt.Fprintf(&b, "fail-closed margin    min %v over %d deadline stops (promised %v)\n",
			r.Margin.Min.Round(time.Millisecond), r.Margin.N, r.Margin.Promised)
	}
	if r.LogStalls > 0 {
		fmt.Fprintf(&b, "log stalls            %d (%d with a store blip inside), longest %v\n",
			r.LogStalls, r.Blips, r.LongestStall.Round(time.Millisecond))
	}
	if s := r.SlowStore; r.Faults[FaultSlowStore] > 0 {
		fmt.Fprintf(&b, "slow store            %d holders through it, %d calls, slowest answer %v (call timeout %v)\n",
			s.Holders, s.Calls, s.Slowest.Round(time.Millisecond), r.Timing.CallTimeout)
		fmt.Fprintf(&b, "                      longest between renewals %v (renew every %v); %d deadline stops, %d explained by a failed call or another fault\n",
			s.RenewalGap.Round(time.Millisecond), r.Timing.RenewEvery, s.DeadlineStops, s.Excused)
	}
	if r.SameOwners > 0 {
		ids := "a distinct owner id each time"
		if r.SharedIDs > 0 {
			ids = fmt.Sprintf("one owner id for both processes in %d", r.SharedIDs)
		}
		fmt.Fprintf(&b, "same owner            %d extra replicas under a live replica's name; the store saw %s\n", r.SameOwners, ids)
	}
	if r.WrapperFreezes.N > 0 {
		r.WrapperFreezes.write(&b)
	}
	fmt.Fprintf(&b, "false step-downs      %d\n", len(r.FalseStepDowns))
	for _, s := range r.FalseStepDowns[:min(len(r.FalseStepDowns), 10)] {
		fmt.Fprintf(&b, "  +%v %s %s epoch %d: %s\n", s.At.Round(time.Millisecond), s.Replica, s.Key, s.Epoch, s.Cause)
	}
	b.WriteString("invariants\n")
	for _, inv := range r.Invariants {
		mark := "ok  "
		if inv.Violations > 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %-36s %6d checked", mark, inv.Name, inv.Checked)
		if inv.Violations > 0 {
			fmt.Fprintf(&b, ", %d violated", inv.Violations)
			if inv.Worst > 0 {
				fmt.Fprintf(&b, ", worst %v", inv.Worst.Round(time.Microsecond))
			}
		}
		b.WriteString("\n")
	}
	if len(r.Violations) > 0 {
		b.WriteString("violations\n")
		for _, v := range r.Violations[:min(len(r.Violations), 50)] {
			fmt.Fprintf(&b, "  +%v [%s] %s\n", v.At.Round(time.Millisecond), v.Invariant, v.Detail)
		}
		if n := len(r.Violations) - 50; n > 0 {
			fmt.Fprintf(&b, "  … and %d more\n", n)
		}
	}
	if r.HistoryDir != "" {
		fmt.Fprintf(&b, "history    %s\n", r.HistoryDir)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (l Latency) String() string {
	if l.N == 0 {
		return "none measured"
	}
	s := fmt.Sprintf("p50 %v, p99 %v, max %v over %d", l.P50.Round(time.Millisecond), l.P99.Round(time.Millisecond),
		l.Max.Round(time.Millisecond), l.N)
	if l.Bound > 0 {
		s += fmt.Sprintf(" (bound %v)", l.Bound)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
