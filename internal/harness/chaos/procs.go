package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenure-dev/tenure/internal/harness/netproxy"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// proc is one replica process seen from the harness.
type proc struct {
	name string
	// configured is the Config.Owner it was started with: a name a
	// same-owner fault gives to a second process. The store knows it by
	// id instead, which only the replica can tell (see storeID).
	configured string
	n          int // spawn order
	cmd        *exec.Cmd
	pid        int
	log        string         // its event log
	proxies    netproxy.Group // networked stores: one per store endpoint
	control    string         // the fault control file (recorder.go); its name + ".src" is the source-down file
	expected   atomic.Bool
	exited     chan struct{}
	busy       bool // a fault is using it; guarded by harness.mu
	id         atomic.Pointer[string]
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// storeID is the owner id p's supervisor acquires leases as (what the
// store's List shows), or "" until p has written it: the proc record, the
// first line of its log. It is read from the replica, never derived from
// the configured name, which the engine may extend (an incarnation
// suffix) and two processes may share.
func (p *proc) storeID() string {
	if id := p.id.Load(); id != nil {
		return *id
	}
	e, ok := p.firstEvent(func(e Event) bool { return e.Ev == evProc && e.Owner != "" })
	if !ok {
		return ""
	}
	p.id.Store(&e.Owner)
	return e.Owner
}

// firstEvent is the first event that match accepts among the first 64 KiB
// of p's event log, which holds the start of its run.
func (p *proc) firstEvent(match func(Event) bool) (Event, bool) {
	f, err := os.Open(p.log)
	if err != nil {
		return Event{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	sc.Buffer(make([]byte, 0, 4<<10), 64<<10)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && match(e) {
			return e, true
		}
	}
	return Event{}, false
}

// spawn starts a new replica process with an owner name of its own.
func (h *harness) spawn() (*proc, error) { return h.spawnWith(spawnOpts{}) }

// spawnOpts are how a replica starts other than as usual.
type spawnOpts struct {
	// owner is its configured owner name; "" for a name of its own.
	owner string
	// busy marks it claimed already, so no other fault can claim it
	// before its own fault is done with it.
	busy bool
	// sourceDown starts it with its pool's key source failing.
	sourceDown bool
	// poolMax is its pool's MaxKeys; 0 for no limit.
	poolMax int
}

// spawnWith starts a replica as o says.
func (h *harness) spawnWith(o spawnOpts) (p *proc, err error) {
	owner, busy := o.owner, o.busy
	h.mu.Lock()
	h.seq++
	n := h.seq
	h.mu.Unlock()
	p = &proc{name: fmt.Sprintf("r%d", n), n: n, exited: make(chan struct{}), busy: busy}
	p.configured = owner
	if owner == "" {
		p.configured = "chaos-" + h.runID + "-" + p.name
	}
	p.log = filepath.Join(h.dir, p.name+".jsonl")
	sb := h.backend
	if sb.networked() {
		eps, err := sb.endpoints()
		if err != nil {
			return nil, err
		}
		var ps netproxy.Group // p is nil by the time a failed return's defers run
		defer func() {
			if err != nil {
				ps.Close()
			}
		}()
		addrs := make([]string, len(eps))
		for i, ep := range eps {
			px, err := netproxy.New(ep)
			if err != nil {
				return nil, fmt.Errorf("chaos: proxy: %w", err)
			}
			ps = append(ps, px)
			addrs[i] = px.Addr()
		}
		p.proxies = ps
		if sb, err = sb.via(addrs); err != nil {
			return nil, err
		}
	}
	p.control = filepath.Join(h.dir, p.name+".ctl")
	if err := setControl(p.control, ""); err != nil {
		return nil, err
	}
	if o.sourceDown {
		if err := p.setSourceDown(true); err != nil {
			return nil, err
		}
	}
	spec := replicaSpec{
		Name: p.name, Owner: p.configured, Store: sb, Keys: h.hist.Keys, Prefix: h.prefix(),
		Timing: h.opts.Timing, Log: p.log, Control: p.control,
		Resource: h.res, Seed: h.opts.Seed ^ uint64(n)*0x9e3779b97f4a7c15, LateStop: h.opts.lateStop,
		Children: childKeys(h.hist.Keys), ChildNoDeadline: h.opts.childNoDeadline,
		Pool: h.poolKeys, SourceDown: p.sourceDown(), PoolMaxKeys: o.poolMax,
	}
	if h.opts.uniqueIDs {
		spec.IDSuffix = fmt.Sprintf("#%s.%d", h.runID, n)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(h.dir, p.name+".stderr"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.opts.Executable, h.opts.ReplicaArgs...)
	cmd.Env = append(os.Environ(), ReplicaEnv+"="+string(js))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = replicaAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("chaos: start replica %s: %w", p.name, err)
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	h.hl.add(Event{Ev: evSpawn, Target: p.name, PID: p.pid, Configured: p.configured})
	h.mu.Lock()
	h.procs[p.name] = p
	h.mu.Unlock()
	h.wg.Go(func() {
		err := cmd.Wait()
		out.Close()
		e := Event{Ev: evExited, Target: p.name, PID: p.pid}
		if err != nil {
			e.Err = err.Error()
		}
		if !p.expected.Load() {
			e.Outcome = "unexpected"
		}
		h.hl.add(e)
		close(p.exited)
	})
	return p, nil
}

// retire forgets a replica that has exited and closes its proxies.
func (h *harness) retire(p *proc) {
	h.mu.Lock()
	delete(h.procs, p.name)
	h.mu.Unlock()
	p.proxies.Close()
}

func (h *harness) live() []*proc {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*proc
	for _, p := range h.procs {
		if p.alive() {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *proc) int { return a.n - b.n })
	return out
}

// replaceCrashed replaces replicas that exited without being told to (a
// crash is also reported by the checker).
func (h *harness) replaceCrashed() {
	h.mu.Lock()
	var dead []*proc
	for _, p := range h.procs {
		if !p.alive() && !p.expected.Load() {
			dead = append(dead, p)
		}
	}
	h.mu.Unlock()
	for _, p := range dead {
		h.log.Warn("replica exited on its own; replacing it", "replica", p.name)
		h.retire(p)
		if _, err := h.spawn(); err != nil {
			h.log.Error("could not replace a replica", "err", err)
		}
	}
}

// holders maps each key with a live lease to its owner, as the store sees it.
func (h *harness) holders(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ls, err := h.mon.List(ctx, "chaos-"+h.runID+"/")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range ls {
		if l.Live {
			out[l.Key] = l.Owner
		}
	}
	return out, nil
}

// settle waits until every key has a live holder among the live replicas,
// up to max; it reports whether that happened.
func (h *harness) settle(ctx context.Context, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if held, err := h.holders(ctx); err == nil {
			owners := map[string]bool{}
			for _, p := range h.live() {
				if id := p.storeID(); id != "" {
					owners[id] = true
				}
			}
			all := true
			for _, k := range h.allKeys() {
				all = all && owners[held[k]]
			}
			if all {
				return true
			}
		}
		_ = sleepCtx(ctx, 50*time.Millisecond)
	}
	return false
}

// allKeys are the lease keys of the singletons and of the pool's keys.
func (h *harness) allKeys() []string { return slices.Concat(h.hist.Keys, h.hist.PoolKeys) }

// holdersRunning reports whether each key's holder has started its
// runner, as its event log says. Faults start only then: a kill that came
// a few milliseconds after the holder's acquisition, before its runner
// had started, killed no running key, so it had no takeover to measure
// and a test that wants one failed.
func (h *harness) holdersRunning(ctx context.Context) bool {
	held, err := h.holders(ctx)
	if err != nil {
		return false
	}
	for _, k := range h.allKeys() {
		if !slices.ContainsFunc(h.live(), func(p *proc) bool { return p.storeID() == held[k] && p.started(k) }) {
			return false
		}
	}
	return true
}

// started reports whether p's event log records a runner start of key.
func (p *proc) started(key string) bool {
	_, ok := p.firstEvent(func(e Event) bool { return e.Ev == evStart && e.Key == key })
	return ok
}

// warmUp starts the replicas and waits until every key has a holder
// running it. A replica that exits meanwhile (a binary that does not call
// ReplicaMain, a store it cannot open) ends the run with what it printed.
func (h *harness) warmUp(ctx context.Context) error {
	for range h.opts.Replicas {
		if _, err := h.spawn(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !h.settle(ctx, 200*time.Millisecond) || !h.holdersRunning(ctx) {
		if err := ctx.Err(); err != nil {
			return err
		}
		h.mu.Lock()
		var dead *proc
		for _, p := range h.procs {
			if !p.alive() {
				dead = p
			}
		}
		h.mu.Unlock()
		if dead != nil {
			out, _ := os.ReadFile(filepath.Join(h.dir, dead.name+".stderr"))
			return fmt.Errorf("chaos: replica %s exited while starting (does %s call chaos.ReplicaMain?): %s",
				dead.name, h.opts.Executable, strings.TrimSpace(string(out[:min(len(out), 2000)])))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: the replicas did not take every key within 30s; see the *.stderr files")
		}
	}
	return nil
}

// claim resolves a step's targets and marks them busy, waiting (until end)
// while other faults use them: the holder of the step's key, else a free
// replica picked by the step; every replica for a store-wide fault.
func (h *harness) claim(ctx context.Context, s Step, end time.Time) []*proc {
	for ctx.Err() == nil && time.Now().Before(end) {
		// Without the holders a step aimed at one would hit a bystander.
		if held, err := h.holders(ctx); err == nil {
			if t := h.tryClaim(s, held); t != nil {
				return t
			}
		}
		_ = sleepCtx(ctx, 50*time.Millisecond)
	}
	return nil
}

func (h *harness) tryClaim(s Step, held map[string]string) []*proc {
	live := h.live()
	ids := make(map[*proc]string, len(live))
	for _, p := range live {
		ids[p] = p.storeID()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.every || len(live) == 0 {
		return nil
	}
	var free []*proc
	for _, p := range live {
		// A signal reaches a replica safely only once it listens, which its
		// proc record (its id) tells.
		if !p.busy && (ids[p] != "" || s.Fault != FaultLogStall) {
			free = append(free, p)
		}
	}
	if s.All || s.Fault == FaultStoreRestart {
		if len(free) < len(live) {
			return nil
		}
		h.every = true
		free = live
	} else if len(free) == 0 {
		return nil
	} else {
		pick := free[s.Pick%len(free)]
		switch s.Fault {
		case FaultFreezeWrapper:
			// Only a replica running child work can leave a child running.
			if pick = h.holderAmong(s, free, ids, held, isChildKey); pick == nil {
				return nil
			}
		case FaultKill:
			// Killing a replica that holds nothing tests nothing: wait for
			// a holder to be free (in CI a kill once hit a bystander, and
			// a run meant to measure takeovers measured none).
			if pick = h.holderAmong(s, free, ids, held, func(int) bool { return true }); pick == nil {
				return nil
			}
		case FaultAbandon:
			// Best aimed at a holder of several keys (abandon.go); with
			// more replicas than keys there may be none, and a holder of
			// one still shows its term end.
			if pick = h.holderOfSeveral(s, free, ids, held); pick == nil {
				if pick = h.holderAmong(s, free, ids, held, func(int) bool { return true }); pick == nil {
					return nil
				}
			}
		}
		for _, p := range free {
			if s.Fault != FaultAbandon && ids[p] != "" && ids[p] == held[h.hist.Keys[s.Key]] {
				pick = p
			}
		}
		free = []*proc{pick}
	}
	for _, p := range free {
		p.busy = true
	}
	return free
}

func (h *harness) unclaim(targets []*proc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range targets {
		p.busy = false
	}
	h.every = false // only ever set while its fault is the only one

}

// shutdown stops every replica gracefully (killing those that hang),
// closes the proxies, and notes panics and data races the replicas printed.
func (h *harness) shutdown() {
	for _, p := range h.live() {
		p.expected.Store(true)
		_ = signalProcess(p.pid, sigCont) // in case a pause was cut short
		if p.storeID() != "" {            // it listens: in case a log stall was cut short
			_ = signalProcess(p.pid, sigResumeLog)
		}
		_ = signalProcess(p.pid, sigTerm)
	}
	deadline := time.After(h.opts.Timing.StopTimeout + 10*time.Second)
	for _, p := range h.live() {
		select {
		case <-p.exited:
		case <-deadline:
			_ = signalProcess(p.pid, sigKill)
			<-p.exited
		}
	}
	h.mu.Lock()
	procs := make([]*proc, 0, len(h.procs))
	for _, p := range h.procs {
		procs = append(procs, p)
	}
	h.mu.Unlock()
	for _, p := range procs {
		h.retire(p)
	}
	h.wg.Wait()
	h.scanStderr()
}

// scanStderr turns a replica's panic, fatal error or data race report into
// an event, so the checker fails the run.
func (h *harness) scanStderr() {
	files, _ := filepath.Glob(filepath.Join(h.dir, "*.stderr"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") ||
				strings.Contains(line, "WARNING: DATA RACE") {
				h.hl.add(Event{Ev: evDiag, Target: strings.TrimSuffix(filepath.Base(f), ".stderr"), Err: line})
				break
			}
		}
		fh.Close()
	}
}
