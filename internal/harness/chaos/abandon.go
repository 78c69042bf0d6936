package chaos

import (
	"context"
	"slices"
)

// This file aims and carries out the abandon fault: a holder stops
// renewing one of its terms, without releasing it, while it renews its
// others, and stops claiming that key for the fault's duration. An engine
// does this with a term it gave up on a deadline, or whose runner would
// not stop after the key left its configuration. The store must end such
// a term on its own within about a TTL of its last renewal: a store that
// kept a process's terms alive together (one session per process) and
// forgot to take the unlisted one off would leave the key held, and run
// nowhere, for as long as the holder lives. The check is abandons
// (check_abandon.go).

// holderOfSeveral picks one of the free replicas that holds two keys or
// more (ids: their store owner ids; held: each held key's owner), or nil
// when none does. A holder of one key would renew nothing else, and its
// whole session would end with the term: a weaker test.
func (h *harness) holderOfSeveral(s Step, free []*proc, ids map[*proc]string, held map[string]string) *proc {
	var holders []*proc
	for _, p := range free {
		if ids[p] != "" && len(heldBy(h.hist.Keys, held, ids[p])) >= 2 {
			holders = append(holders, p)
		}
	}
	if len(holders) == 0 {
		return nil
	}
	return holders[s.Pick%len(holders)]
}

// heldBy lists the keys, in the order of keys, whose live holder is owner.
func heldBy(keys []string, held map[string]string, owner string) []string {
	var out []string
	for _, k := range keys {
		if held[k] == owner {
			out = append(out, k)
		}
	}
	return out
}

// abandon makes p leave one of its keys (the step's, if p holds it) out of
// its renewals and acquisitions for the step's duration, through its
// control file (recorder.go). It first lets two renewal periods pass, so
// that the term has been renewed and, on a store with sessions, put on
// its holder's session: a term abandoned before its first renewal is on
// its own record and tests nothing a session could break (the first step
// of a run comes right after the warm-up, with terms a moment old).
func (h *harness) abandon(ctx context.Context, p *proc, s Step) {
	if sleepCtx(ctx, 2*h.opts.Timing.RenewEvery) != nil {
		return
	}
	held, err := h.holders(ctx)
	if err != nil {
		h.log.Warn("abandon: could not read the holders; skipped", "replica", p.name, "err", err)
		return
	}
	mine := heldBy(h.hist.Keys, held, p.storeID())
	if len(mine) == 0 {
		h.log.Warn("abandon: the target holds no key any more; skipped", "replica", p.name)
		return
	}
	key := mine[0]
	if want := h.hist.Keys[s.Key]; slices.Contains(mine, want) {
		key = want
	}
	h.hl.add(Event{Ev: evFaultBegin, Fault: FaultAbandon, Target: p.name, Key: key, Dur: int64(s.Dur)})
	cmd := "abandon "
	if h.opts.abandonedLivesOn {
		cmd = "abandon-renewing "
	}
	if err := setControl(p.control, cmd+key); err != nil {
		h.log.Warn("could not write a control file", "replica", p.name, "err", err)
	}
	_ = sleepCtx(ctx, s.Dur)
	if err := setControl(p.control, ""); err != nil {
		h.log.Warn("could not write a control file", "replica", p.name, "err", err)
	}
	h.hl.add(Event{Ev: evFaultEnd, Fault: FaultAbandon, Target: p.name})
}
