//go:build linux

package poolload

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// formatReport is the report's markdown: a line on the run, the table,
// then per row where the store's work went, then where figures come from.
func formatReport(k knobs, rows []*row, notes []string, began time.Time, loadBefore, loadAfter string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d keys (unless a row says otherwise) in one pool over %d worker processes, TTL %v (a round every %v), steady window %v; %s – %s UTC; load average %s before, %s after; %d CPUs\n\n",
		k.keys, k.workers, k.ttl, k.ttl/3, k.window, began.UTC().Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04"),
		loadBefore, loadAfter, runtime.NumCPU())
	b.WriteString("| store | mode | keys | workers | every key held after | rows read/s (PG), commands/s (Redis) | statements/s | List rows/s (workers) | store CPU | worker CPU % mean / max | heap+stack per held key: steady / after GC | RSS per held key | round mean / max | renewal call mean / max | in window: acquired / handed over |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		rate := func(v float64) float64 { return v / r.storeWindow.Seconds() }
		read, stmts := "–", ""
		switch r.store {
		case "postgres":
			read = count(rate(r.vals["seq_tup_read"] + r.vals["idx_tup_fetch"]))
			if _, ok := r.vals["pss_calls"]; ok {
				stmts = count(rate(r.vals["pss_calls"]))
			} else {
				stmts = count(rate(r.vals["xact_commit"]+r.vals["xact_rollback"])) + " xact"
			}
		case "redis":
			read = count(rate(r.vals["calls"])) + " cmd"
			stmts = count(rate(r.vals["requests"]))
		}
		mode := r.mode
		if r.unsettled {
			mode += " (unsettled)"
		}
		held := r.startup.Round(time.Second).String()
		if r.neverHeld > 0 {
			held = fmt.Sprintf("never (%s held at %v)", count(float64(r.neverHeld)), r.startup.Round(time.Second))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %s | %.1f %% | %s | %s / %s | %s | %s | %s | %d / %d |\n",
			r.store, mode, r.keys, r.workers, held, read, stmts,
			count(float64(r.churn(func(s sample) int64 { return s.Calls.ListRows }))/r.workerWindow.Seconds()),
			100*r.storeCPU.Seconds()/r.storeWindow.Seconds(), r.workerCPU(),
			bytes(r.perKey(r.end, func(s sample) uint64 { return s.HeapInuse + s.StackInuse })),
			bytes(r.perKey(r.gc, func(s sample) uint64 { return s.HeapAlloc + s.StackInuse })),
			bytes(r.perKey(r.end, func(s sample) uint64 { return s.RSS })),
			r.timing(func(s sample) (int64, time.Duration, time.Duration) { return s.Rounds, s.RoundTotal, s.RoundMax }),
			r.timing(func(s sample) (int64, time.Duration, time.Duration) { return s.Renewals, s.RenewTotal, s.RenewMax }),
			r.churn(func(s sample) int64 { return s.Acquired }),
			r.churn(func(s sample) int64 {
				var n int64
				for _, v := range s.Handovers {
					n += v
				}
				return n
			}))
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- %s, %s (FullReadEvery %v): %s; %s; %s; after the window the store showed %s keys held%s; settled %v after every key was held; graceful stop of all workers %v; warnings logged %d; load average after the window %s.\n",
			r.store, r.mode, r.fullReadEveryText(), r.storeDetail(), r.callDetail(), r.memDetail(), count(float64(r.listed)), r.mismatchText(), r.settled.Round(time.Second), r.stop.Round(100*time.Millisecond),
			r.logLines(), r.load)
	}
	b.WriteString("\n")
	for _, n := range notes {
		b.WriteString("- " + n + ".\n")
	}
	b.WriteString("- Worker CPU: user + system (getrusage) over the window, % of one core. Memory: runtime.MemStats of each worker at the window's end (HeapInuse + StackInuse), and after runtime.GC with no List in flight (HeapAlloc + StackInuse), summed over workers and divided by the keys they hold; process baseline (store client, runtime) included, and split out in each row's notes. RSS from /proc/self/statm.\n")
	return b.String()
}

func (r *row) fullReadEveryText() string {
	if r.fullReadEvery == 0 {
		return "default, 1m"
	}
	return r.fullReadEvery.String()
}

// storeDetail is where the store's work went.
func (r *row) storeDetail() string {
	rate := func(k string) string { return count(r.vals[k]/r.storeWindow.Seconds()) + "/s" }
	switch r.store {
	case "postgres":
		return fmt.Sprintf("seq scans %s reading %s rows, index scans %s fetching %s; rows inserted %s, updated %s (HOT %s), deleted %s; database tup_returned %s, tup_fetched %s, blks_hit %s, blks_read %s; commits %s, rollbacks %s",
			rate("seq_scan"), rate("seq_tup_read"), rate("idx_scan"), rate("idx_tup_fetch"),
			rate("n_tup_ins"), rate("n_tup_upd"), rate("n_tup_hot_upd"), rate("n_tup_del"),
			rate("tup_returned"), rate("tup_fetched"), rate("blks_hit"), rate("blks_read"), rate("xact_commit"), rate("xact_rollback"))
	case "redis":
		type cmd struct {
			name         string
			calls, usecs float64
		}
		var cmds []cmd
		for k, v := range r.vals {
			if name, ok := strings.CutPrefix(k, "calls."); ok && v > 0 {
				cmds = append(cmds, cmd{name, v, r.vals["usec."+name]})
			}
		}
		slices.SortFunc(cmds, func(a, b cmd) int { return int(b.usecs - a.usecs) })
		var parts []string
		for _, c := range cmds {
			parts = append(parts, fmt.Sprintf("%s %s/s at %.0f µs (%.1f %% of a core)", c.name,
				count(c.calls/r.storeWindow.Seconds()), c.usecs/c.calls, 100*c.usecs/1e6/r.storeWindow.Seconds()))
		}
		return "commands by time in Redis: " + strings.Join(parts, ", ")
	}
	return ""
}

// callDetail is the workers' store calls, client side: in the window,
// and from their start until every key was held.
func (r *row) callDetail() string {
	win := r.workerWindow.Seconds()
	d := func(of func(callStats) int64) int64 { return r.churn(func(s sample) int64 { return of(s.Calls) }) }
	mean := func(total, n int64) time.Duration {
		if n == 0 {
			return 0
		}
		return roundDur(time.Duration(total / n))
	}
	lists, renews := d(func(c callStats) int64 { return c.Lists }), d(func(c callStats) int64 { return c.Renews })
	var acq, acqNS int64
	for _, s := range r.atHeld {
		acq += s.Calls.Acquires
		acqNS += int64(s.Calls.AcquireTime)
	}
	share := 0.0
	if len(r.atHeld) > 0 {
		share = 100 * time.Duration(acqNS/int64(len(r.atHeld))).Seconds() / r.startup.Seconds()
	}
	var causes []string
	for _, c := range []string{"released", "rebalance", "lost", "expired", "other"} {
		if n := r.churn(func(s sample) int64 { return s.Handovers[c] }); n > 0 {
			causes = append(causes, fmt.Sprintf("%s %d", c, n))
		}
	}
	if len(causes) == 0 {
		causes = []string{"none"}
	}
	unconfirmed := r.churn(func(s sample) int64 { return s.Unconfirm })
	var startCauses []string
	var deadline int64
	for _, c := range []string{"released", "rebalance", "lost", "expired", "other"} {
		var n int64
		for _, s := range r.atHeld {
			n += s.Handovers[c]
		}
		if n > 0 {
			startCauses = append(startCauses, fmt.Sprintf("%s %d", c, n))
		}
	}
	for _, s := range r.atHeld {
		deadline += s.Deadline
	}
	if len(startCauses) == 0 {
		startCauses = []string{"none"}
	}
	return fmt.Sprintf("hand-overs in the window by cause: %s; unconfirmed renewals %d, deadline stops %d; "+
		"during the start: hand-overs %s, deadline stops %d, longest round %v, longest renewal call %v; "+
		"workers' calls in the window: List %s/s (mean %v, %s rows each), Renew %s/s (mean %v), Acquire %d (%d refused%s); from start to every key held: %d Acquire calls, mean %v, %.0f %% of a worker's start spent in Acquire",
		strings.Join(causes, ", "), unconfirmed, r.churn(func(s sample) int64 { return s.Deadline }),
		strings.Join(startCauses, ", "), deadline, roundDur(r.startRoundMax), roundDur(r.startRenewMax),
		count(float64(lists)/win), mean(int64(d(func(c callStats) int64 { return int64(c.ListTime) })), lists),
		count(float64(d(func(c callStats) int64 { return c.ListRows }))/float64(max(1, lists))),
		count(float64(renews)/win), mean(int64(d(func(c callStats) int64 { return int64(c.RenewTime) })), renews),
		d(func(c callStats) int64 { return c.Acquires }), d(func(c callStats) int64 { return c.Refused }), r.lastRefusal(), acq, mean(acqNS, acq), share)
}

// lastRefusal is one worker's last refused acquisition, when the window
// had any.
func (r *row) lastRefusal() string {
	for i, s := range r.end {
		if s.Calls.Refused > r.start[i].Calls.Refused && len(s.Calls.RefusedLast) > 0 {
			return fmt.Sprintf(", the last of w%02d: %s", i, s.Calls.RefusedLast[len(s.Calls.RefusedLast)-1])
		}
	}
	return ""
}

func (r *row) mismatchText() string {
	if r.mismatch == "" {
		return ""
	}
	return " (" + r.mismatch + ")"
}

// memDetail splits the memory per held key after GC into heap and stack.
func (r *row) memDetail() string {
	var goroutines int
	for _, s := range r.gc {
		goroutines += s.Goroutines
	}
	heap := r.perKey(r.gc, func(s sample) uint64 { return s.HeapAlloc })
	before := r.perKey(r.gc, func(s sample) uint64 { return s.Before })
	runner := r.perKey(r.gc, func(s sample) uint64 { return uint64(s.Runner * float64(s.Held)) })
	return fmt.Sprintf("per held key after GC: heap %s (the process before the supervisor ran, with the source's keys and the store's client, %s; "+
		"the runners' goroutines, as idle ones take, %s; Tenure's own %s), stack %s; goroutines %d in all",
		bytes(heap), bytes(before), bytes(runner), bytes(heap-before-runner),
		bytes(r.perKey(r.gc, func(s sample) uint64 { return s.StackInuse })), goroutines)
}

// workerCPU is the mean and the highest worker's CPU over the window.
func (r *row) workerCPU() string {
	var total, top time.Duration
	for _, c := range r.cpu {
		total += c
		top = max(top, c)
	}
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / r.workerWindow.Seconds() }
	return fmt.Sprintf("%.1f / %.1f", pct(total/time.Duration(max(1, len(r.cpu)))), pct(top))
}

// perKey is the sum of of over the samples divided by the keys held.
func (r *row) perKey(ss []sample, of func(sample) uint64) float64 {
	var total uint64
	var held int64
	for _, s := range ss {
		total += of(s)
		held += s.Held
	}
	if held == 0 {
		return 0
	}
	return float64(total) / float64(held)
}

// timing is the mean of a timed operation over the window and its
// longest.
func (r *row) timing(of func(sample) (int64, time.Duration, time.Duration)) string {
	var n int64
	var total, top time.Duration
	for i := range r.end {
		n1, t1, m := of(r.end[i])
		n0, t0, _ := of(r.start[i])
		n += n1 - n0
		total += t1 - t0
		top = max(top, m)
	}
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%v / %v", roundDur(total/time.Duration(n)), roundDur(top))
}

func (r *row) churn(of func(sample) int64) int64 {
	var n int64
	for i := range r.end {
		n += of(r.end[i]) - of(r.start[i])
	}
	return n
}

func (r *row) logLines() int64 {
	var n int64
	for _, s := range r.end {
		n += s.LogLines
	}
	return n
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// count writes n with thousands separators, one decimal below 10.
func count(n float64) string {
	if n < 10 {
		return fmt.Sprintf("%.1f", n)
	}
	s := fmt.Sprintf("%.0f", n)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func bytes(n float64) string { return count(n) + " B" }
