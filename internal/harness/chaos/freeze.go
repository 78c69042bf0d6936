package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// This file aims and carries out the freeze-wrapper fault: SIGSTOP to a
// replica while a key's work runs as its child (childwork.go), neither to
// the guard nor to the child, which are in process groups of their own
// and run on. The replica's renewals stop; a peer takes the key at expiry
// + grace; the guard must have stopped the child at the lease's safety
// deadline before that, on its own.

// holderAmong picks one of the free replicas that holds a key for which
// wanted is true (ids: their store owner ids; held: each held key's
// owner), or nil when none does yet. The holder of the step's own key is
// preferred by the caller.
func (h *harness) holderAmong(s Step, free []*proc, ids map[*proc]string, held map[string]string, wanted func(key int) bool) *proc {
	var holders []*proc
	for _, p := range free {
		for i, k := range h.hist.Keys {
			if wanted(i) && ids[p] != "" && held[k] == ids[p] {
				holders = append(holders, p)
				break
			}
		}
	}
	if len(holders) == 0 {
		return nil
	}
	return holders[s.Pick%len(holders)]
}

// freezeWrapper freezes p for the step's duration once a child of its
// runs (up to a TTL's wait: a holder frozen between its grant and the
// child's start would leave nothing running to stop).
func (h *harness) freezeWrapper(ctx context.Context, p *proc, s Step) {
	until := time.Now().Add(h.opts.Timing.TTL)
	for !runsChild(p.pid) && time.Now().Before(until) && ctx.Err() == nil {
		_ = sleepCtx(ctx, 20*time.Millisecond)
	}
	h.pause(ctx, p, FaultFreezeWrapper, s.Dur)
}

// runsChild reports whether a guard started by the replica pid has a
// child of its own: the work, running.
func runsChild(pid int) bool {
	for _, guard := range procChildren(pid) {
		if len(procChildren(guard)) > 0 {
			return true
		}
	}
	return false
}

// procChildren lists pid's child processes, which Linux keeps per thread
// (the thread that forked each). None where /proc does not tell.
func procChildren(pid int) []int {
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
