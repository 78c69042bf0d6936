package chaos

import (
	"context"
	"time"
)

// This file carries out fault steps on the replicas claimed for them.

// apply carries out one fault step on the targets claimed for it.
func (h *harness) apply(ctx context.Context, s Step, targets []*proc) {
	p := targets[0]
	h.log.Info("fault", "kind", s.Fault, "target", p.name, "all", s.All, "dur", s.Dur, "latency", s.Latency)
	switch s.Fault {
	case FaultKill, FaultRestart:
		h.stopProc(p, s.Fault)
		_ = sleepCtx(ctx, s.Respawn)
		if _, err := h.spawn(); err != nil {
			h.log.Error("could not start a replacement replica", "err", err)
		}
	case FaultPause:
		h.pause(ctx, p, s.Fault, s.Dur)
	case FaultFreezeWrapper:
		h.freezeWrapper(ctx, p, s)
	case FaultLogStall:
		h.logStall(ctx, p, s)
	case FaultSameOwner:
		h.sameOwner(ctx, p, s)
	case FaultAbandon:
		h.abandon(ctx, p, s)
	case FaultSourceDown:
		h.restartAs(ctx, p, s, spawnOpts{sourceDown: true, busy: true}, func(q *proc) {
			if err := q.setSourceDown(false); err != nil {
				h.log.Error("could not mend a replica's pool source", "replica", q.name, "err", err)
			}
		})
	case FaultLowMax:
		h.restartAs(ctx, p, s, spawnOpts{poolMax: 1, busy: true}, nil)
	case FaultStoreRestart:
		h.hl.add(Event{Ev: evFaultBegin, Fault: s.Fault, Target: "*", Dur: int64(s.Dur)})
		if err := h.opts.RestartStore(ctx, s.Dur); err != nil {
			h.log.Error("could not restart the store", "err", err)
		}
		h.hl.add(Event{Ev: evFaultEnd, Fault: s.Fault, Target: "*"})
	default:
		name := p.name
		if s.All {
			name = "*"
		}
		e := Event{Ev: evFaultBegin, Fault: s.Fault, Target: name, Dur: int64(max(s.Dur, s.Latency))}
		if s.Fault == FaultSlowStore {
			e.Dur, e.Latency = int64(s.Dur), int64(s.Latency)
		}
		h.hl.add(e)
		for _, t := range targets {
			h.network(t, s, true)
		}
		_ = sleepCtx(ctx, s.Dur)
		for _, t := range targets {
			h.network(t, s, false)
		}
		h.hl.add(Event{Ev: evFaultEnd, Fault: s.Fault, Target: name})
	}
}

// stopProc kills (kill) or gracefully stops (restart) a replica and waits
// for it to be gone.
func (h *harness) stopProc(p *proc, fault string) {
	p.expected.Store(true)
	h.hl.add(Event{Ev: evFaultBegin, Fault: fault, Target: p.name, PID: p.pid})
	h.halt(p, fault == FaultKill)
	h.hl.add(Event{Ev: evFaultEnd, Fault: fault, Target: p.name})
	h.retire(p)
}

// halt sends SIGKILL (kill) or SIGTERM and waits until p is gone, killing
// it if a graceful stop hangs.
func (h *harness) halt(p *proc, kill bool) {
	sig, wait := sigKill, 10*time.Second
	if !kill {
		sig, wait = sigTerm, h.opts.Timing.StopTimeout+5*time.Second
	}
	if err := signalProcess(p.pid, sig); err != nil {
		h.log.Warn("signal failed", "replica", p.name, "err", err)
	}
	select {
	case <-p.exited:
	case <-time.After(wait):
		_ = signalProcess(p.pid, sigKill)
		<-p.exited
	}
}

// pause freezes a replica for d. The recorded pause lies inside the real
// one: it begins once every thread is seen stopped and ends before SIGCONT.
// The signal goes to the replica's pid alone: the guards and children of
// its child work, each in a process group of its own, run on (for
// freeze-wrapper, that is the point).
func (h *harness) pause(ctx context.Context, p *proc, kind string, d time.Duration) {
	if err := signalProcess(p.pid, sigStop); err != nil {
		return
	}
	if err := awaitStopped(p.pid, 2*time.Second); err == nil {
		h.hl.add(Event{Ev: evFaultBegin, Fault: kind, Target: p.name, Dur: int64(d)})
		_ = sleepCtx(ctx, d)
		h.hl.add(Event{Ev: evFaultEnd, Fault: kind, Target: p.name})
	} else {
		h.log.Warn("pause not confirmed; resuming", "replica", p.name, "err", err)
	}
	_ = signalProcess(p.pid, sigCont)
}

// logStall closes a replica's log gate for the step's duration and, with
// a blip, cuts it off from the store shortly after, so that it has a
// failed renewal to log and a deadline to keep while its log is stuck. The
// replica records the gate's real moments (evLogGate); the window the
// harness records starts after the stall was asked for and ends before it
// is lifted.
func (h *harness) logStall(ctx context.Context, p *proc, s Step) {
	if err := signalProcess(p.pid, sigStallLog); err != nil {
		h.log.Warn("could not stall a replica's log", "replica", p.name, "err", err)
		return
	}
	h.hl.add(Event{Ev: evFaultBegin, Fault: FaultLogStall, Target: p.name, Dur: int64(s.Dur)})
	began := time.Now()
	if s.Blip > 0 {
		_ = sleepCtx(ctx, min(100*time.Millisecond, s.Dur/4))
		blip := Step{Fault: FaultPartition, Dur: s.Blip}
		h.hl.add(Event{Ev: evFaultBegin, Fault: FaultPartition, Target: p.name, Dur: int64(s.Blip)})
		h.network(p, blip, true)
		_ = sleepCtx(ctx, s.Blip)
		h.network(p, blip, false)
		h.hl.add(Event{Ev: evFaultEnd, Fault: FaultPartition, Target: p.name})
	}
	_ = sleepCtx(ctx, s.Dur-time.Since(began))
	h.hl.add(Event{Ev: evFaultEnd, Fault: FaultLogStall, Target: p.name})
	if err := signalProcess(p.pid, sigResumeLog); err != nil {
		h.log.Warn("could not resume a replica's log", "replica", p.name, "err", err)
	}
}

// sameOwner starts an extra replica configured with p's owner name, lets
// both run for the step's duration, and stops the extra one gracefully.
// The recorded window lasts until the extra replica is gone.
func (h *harness) sameOwner(ctx context.Context, p *proc, s Step) {
	x, err := h.spawnWith(spawnOpts{owner: p.configured, busy: true})
	if err != nil {
		h.log.Error("could not start a replica under a shared owner name", "err", err)
		return
	}
	h.hl.add(Event{Ev: evFaultBegin, Fault: FaultSameOwner, Target: p.name, Peer: x.name, Dur: int64(s.Dur),
		Configured: p.configured})
	_ = sleepCtx(ctx, s.Dur)
	x.expected.Store(true)
	h.halt(x, false)
	h.hl.add(Event{Ev: evFaultEnd, Fault: FaultSameOwner, Target: p.name, Peer: x.name})
	h.retire(x)
}

// network starts or ends a network fault for one replica: through its
// proxies (every endpoint of the store at once), or its control file for
// SQLite.
func (h *harness) network(p *proc, s Step, on bool) {
	if len(p.proxies) > 0 {
		switch s.Fault {
		case FaultPartition:
			p.proxies.SetDown(on)
		case FaultHold:
			p.proxies.SetHold(on)
		case FaultLoseReplies:
			p.proxies.SetLose(on)
		case FaultLatency:
			p.proxies.SetDelay(map[bool]time.Duration{true: s.Latency}[on])
		case FaultSlowStore:
			// The added time of a call, spread over the round trips of the
			// store's slowest steady call, half each way: every call still
			// answers within the call timeout, as the fault promises.
			rt := time.Duration(roundTrips[h.backend.Kind])
			p.proxies.SetDelay(map[bool]time.Duration{true: s.Latency / (2 * rt)}[on])
		}
		return
	}
	cmd := ""
	if on {
		cmd = map[string]string{FaultPartition: "down", FaultHold: "hold", FaultLoseReplies: "lose", FaultLatency: "delay " + s.Latency.String(),
			FaultSlowStore: "slow " + s.Latency.String()}[s.Fault]
	}
	if err := setControl(p.control, cmd); err != nil {
		h.log.Warn("could not write a control file", "replica", p.name, "err", err)
	}
}
