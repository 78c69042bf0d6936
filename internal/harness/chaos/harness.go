package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

// Timing is the lease timing every replica uses.
type Timing struct {
	TTL         time.Duration `json:"ttl"`
	Grace       time.Duration `json:"grace"`
	RenewEvery  time.Duration `json:"renew_every"`
	CallTimeout time.Duration `json:"call_timeout"`
	StopTimeout time.Duration `json:"stop_timeout"`
}

// DefaultTiming is short, so that a run of a few minutes sees hundreds of
// takeovers, and still within what every store answers comfortably.
func DefaultTiming() Timing {
	return Timing{TTL: 2 * time.Second, Grace: time.Second, RenewEvery: 600 * time.Millisecond,
		CallTimeout: 300 * time.Millisecond, StopTimeout: 5 * time.Second}
}

// Options configures a run. The zero value of each field means its default.
type Options struct {
	// Store is the store under test, any URL storeurl opens: sqlite:PATH,
	// postgres://…, mysql://…, redis://…, etcd://… or etcd+https://…. The
	// run works in a table (namespace, prefix) of its own and drops it at
	// the end. Required.
	Store string
	// Duration is how long faults are injected. Default 2m.
	Duration time.Duration
	// Seed draws the fault schedule; the same seed replays the same
	// schedule. Zero picks one at random (reported).
	Seed uint64
	// Replicas is how many replica processes run at once. Default 3.
	Replicas int
	// Keys is how many keys each replica wants. Default 4.
	Keys int
	// PoolKeys, when not zero, is how many keys every replica also shares
	// in a pool (Supervisor.AddPool), whose work is checked like the
	// singletons' and must run somewhere (see the source-down fault).
	// Default 0: no pool.
	PoolKeys int
	// Timing is the replicas' lease timing; zero fields take DefaultTiming.
	Timing Timing
	// Concurrency is how many faults may be under way at once, each on
	// replicas of its own. Default 1: one at a time, each followed by a
	// wait until every key has a holder again.
	Concurrency int
	// Faults restricts the fault kinds (see FaultKinds). Default: all
	// (store-restart only with RestartStore).
	Faults []string
	// RestartStore, when set, crashes the store under test and brings it
	// back after down, for a server the caller owns (tests); it returns
	// once the store answers again. The store must keep every write it
	// acknowledged (Redis: appendfsync always): one that loses them may
	// hand a key to two holders, which package tenure does not promise to
	// survive.
	RestartStore func(ctx context.Context, down time.Duration) error
	// Executable is the binary started as a replica with ReplicaEnv set;
	// it must call ReplicaMain (see IsReplica). Default: this executable.
	Executable string
	// ReplicaArgs are its arguments (e.g. a hidden subcommand). Default:
	// none, or "-test.run=^$" when this is a test binary, so a TestMain
	// that forgot to call ReplicaMain runs no tests instead of recursing.
	ReplicaArgs []string
	// HistoryDir keeps the run's history (logs, schedule, report, SVG
	// timeline) there; it must be empty or new. Default: a temporary
	// directory, removed when the run passes and kept (named in the
	// report) when it fails.
	HistoryDir string
	// Logger receives progress (faults as they happen). Default: silent.
	Logger *slog.Logger

	// lateStop makes every runner go on working that long after its
	// context ends: a broken runner, for the test that proves a run
	// catches one.
	lateStop time.Duration
	// uniqueIDs gives every replica process an owner id of its own beyond
	// its configured name (see replicaSpec.IDSuffix).
	uniqueIDs bool
	// childNoDeadline starts child work without a deadline for its guard:
	// the test that proves a frozen wrapper's child is caught.
	childNoDeadline bool
	// abandonedLivesOn makes the abandon fault go on renewing the term it
	// says it left out: a store that keeps an unlisted term alive with its
	// holder's others, for the test that proves a run catches one.
	abandonedLivesOn bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Store == "" {
		return o, errors.New("chaos: Options.Store is required")
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Minute
	}
	if o.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Seed = binary.LittleEndian.Uint64(b[:])>>1 | 1
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Keys == 0 {
		o.Keys = 4
	}
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	d := DefaultTiming()
	t := &o.Timing
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&t.TTL, d.TTL}, {&t.Grace, d.Grace}, {&t.RenewEvery, d.RenewEvery},
		{&t.CallTimeout, d.CallTimeout}, {&t.StopTimeout, d.StopTimeout},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if len(o.Faults) == 0 {
		o.Faults = slices.DeleteFunc(slices.Clone(FaultKinds), func(f string) bool {
			return f == FaultStoreRestart && o.RestartStore == nil || needsPool(f) && o.PoolKeys == 0
		})
	}
	for _, f := range o.Faults {
		if !slices.Contains(FaultKinds, f) {
			return o, fmt.Errorf("chaos: unknown fault kind %q (known: %v)", f, FaultKinds)
		}
		if f == FaultStoreRestart && o.RestartStore == nil {
			return o, errors.New("chaos: the store-restart fault needs Options.RestartStore")
		}
		if needsPool(f) && o.PoolKeys == 0 {
			return o, fmt.Errorf("chaos: the %s fault needs a pool (Options.PoolKeys)", f)
		}
	}
	switch {
	case o.Duration < 0:
		return o, fmt.Errorf("chaos: Duration %v is negative", o.Duration)
	case o.Replicas < 2:
		return o, fmt.Errorf("chaos: Replicas %d: at least two are needed for a takeover", o.Replicas)
	case o.Concurrency < 1 || o.Concurrency > o.Replicas:
		return o, fmt.Errorf("chaos: Concurrency %d: between 1 and Replicas (%d)", o.Concurrency, o.Replicas)
	case o.Keys < 1 || o.Keys > 64:
		return o, fmt.Errorf("chaos: Keys %d: between 1 and 64", o.Keys)
	case o.PoolKeys < 0 || o.PoolKeys > 64:
		return o, fmt.Errorf("chaos: PoolKeys %d: between 0 (no pool) and 64", o.PoolKeys)
	}
	if o.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("chaos: find this executable: %w", err)
		}
		o.Executable = exe
		if o.ReplicaArgs == nil && flag.Lookup("test.run") != nil {
			o.ReplicaArgs = []string{"-test.run=^$"}
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o, nil
}

// History is everything a run recorded: its parameters, the faults it
// drew, and every event of every process, ordered by time.
type History struct {
	Seed   uint64   `json:"seed"`
	Store  string   `json:"store"` // redacted URL
	Kind   string   `json:"kind"`
	Timing Timing   `json:"timing"`
	Keys   []string `json:"keys"`
	// PoolKeys are the lease keys of the pool's keys, if the run had one.
	PoolKeys []string      `json:"pool_keys,omitempty"`
	Replicas int           `json:"replicas"`
	Duration time.Duration `json:"duration"`         // planned time of faults
	Faults   []string      `json:"faults,omitempty"` // the kinds the schedule drew from
	Plan     []Step        `json:"plan"`             // the steps that ran, in order
	Events   []Event       `json:"-"`                // from the *.jsonl logs
}

const metaFile = "history.json"

// LoadHistory reads a history directory written by Run.
func LoadHistory(dir string) (*History, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	h := new(History)
	if err := json.Unmarshal(b, h); err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", metaFile, err)
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	for _, p := range logs {
		evs, err := readLog(p)
		if err != nil {
			return nil, err
		}
		h.Events = append(h.Events, evs...)
	}
	slices.SortStableFunc(h.Events, func(a, b Event) int { return compareInt(a.T, b.T) })
	return h, nil
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Run starts the replicas on the store, injects faults for the duration,
// shuts everything down, and checks the history. The error is for a run
// that could not be carried out; violations are in the report
// (Report.OK).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if !supported {
		return nil, errors.New("chaos: the fault-injection harness runs on Linux only")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var idb [4]byte
	_, _ = rand.Read(idb[:])
	runID := hex.EncodeToString(idb[:])
	b, err := parseBackend(o.Store, "chaos_"+runID)
	if err != nil {
		return nil, err
	}
	dir, autoDir := o.HistoryDir, o.HistoryDir == ""
	if autoDir {
		dir, err = os.MkdirTemp("", fmt.Sprintf("tenure-chaos-%d-*", o.Seed))
	} else {
		err = emptyDir(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("chaos: history directory: %w", err)
	}
	h := &harness{opts: o, runID: runID, dir: dir, backend: b, procs: map[string]*proc{},
		log: o.Logger.With("seed", o.Seed)}
	h.hist = History{Seed: o.Seed, Store: store.RedactURL(o.Store), Kind: b.Kind, Timing: o.Timing,
		Replicas: o.Replicas, Duration: o.Duration, Faults: o.Faults}
	for i := range o.Keys {
		h.hist.Keys = append(h.hist.Keys, fmt.Sprintf("chaos-%s/k%d", runID, i+1))
	}
	for i := range o.PoolKeys {
		h.poolKeys = append(h.poolKeys, fmt.Sprintf("p%d", i+1))
		h.hist.PoolKeys = append(h.hist.PoolKeys, poolkey.Key(h.prefix(), poolName, h.poolKeys[i]))
	}
	// A store the run fails over may lose what it acknowledged; a
	// resource kept in it would lose fenced writes and make the fencing
	// check meaningless.
	h.res = newResourceSpec(b, runID, dir, o.RestartStore == nil)

	runErr := h.run(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := errors.Join(b.cleanup(cctx), dropResource(cctx, h.res)); err != nil {
		h.log.Warn("could not drop the run's scratch tables or keys", "err", b.redact(err))
	}
	if runErr != nil {
		return nil, fmt.Errorf("%w (history kept in %s)", runErr, dir)
	}
	hist, err := LoadHistory(dir)
	if err != nil {
		return nil, err
	}
	rep := Check(hist)
	rep.History = hist
	rep.HistoryDir = dir
	if err := saveArtifacts(dir, rep); err != nil {
		h.log.Warn("could not save the report", "err", err)
	}
	if rep.OK() && autoDir {
		_ = os.RemoveAll(dir)
		rep.HistoryDir = ""
	}
	return rep, nil
}

func saveArtifacts(dir string, rep *Report) error {
	f, err := os.Create(filepath.Join(dir, "report.txt"))
	if err != nil {
		return err
	}
	werr := rep.WriteText(f)
	if err := errors.Join(werr, f.Close()); err != nil {
		return err
	}
	g, err := os.Create(filepath.Join(dir, "timeline.svg"))
	if err != nil {
		return err
	}
	return errors.Join(WriteTimeline(g, rep.History), g.Close())
}

// harness is one run in progress.
type harness struct {
	opts    Options
	runID   string
	dir     string
	backend backend
	res     resourceSpec
	log     *slog.Logger
	hl      *eventLog
	mon     closingStore // the harness's own view of the store, for targeting
	hist    History
	// poolKeys are the pool's keys as its source lists them.
	poolKeys []string

	mu    sync.Mutex
	procs map[string]*proc // live replicas by name
	seq   int
	// every is set while a fault holds every replica (a store-wide fault).
	every bool
	wg    sync.WaitGroup // process waiters
}

// run carries out the run; the history is on disk when it returns.
func (h *harness) run(ctx context.Context) (err error) {
	if err := h.writeMeta(); err != nil {
		return err
	}
	if h.hl, err = openLog(filepath.Join(h.dir, "harness.jsonl"), ""); err != nil {
		return err
	}
	defer h.hl.close()
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	h.mon, err = h.backend.open(octx)
	if err == nil {
		err = prepareResource(octx, h.res)
	}
	cancel()
	if err != nil {
		if h.mon != nil {
			h.mon.Close()
		}
		return fmt.Errorf("chaos: prepare the store: %w", err)
	}
	defer h.mon.Close()
	defer h.wg.Wait()
	defer h.shutdown()

	if err := h.warmUp(ctx); err != nil {
		return err
	}
	h.log.Info("replicas up; injecting faults", "duration", h.opts.Duration, "store", h.hist.Store)
	h.hl.add(clockEvent(evRunBegin))
	last := h.inject(ctx)
	// A fault that ended just now has its takeover still to come: a run
	// that ended first would measure none (a kill 2.5 s before the end
	// once left a test with nothing to check). The replicas run on, without
	// faults, until every fault's bound has passed.
	bound := takeoverBoundOf(h.opts.Timing, h.backend.Kind)
	if h.opts.PoolKeys > 0 {
		bound = poolBoundOf(h.opts.Timing, h.backend.Kind)
	}
	_ = sleepCtx(ctx, time.Until(last.Add(bound)))
	h.hl.add(clockEvent(evRunEnd))
	return h.writeMeta()
}

// prefix is the namespace of every lease key of the run.
func (h *harness) prefix() string { return "chaos-" + h.runID + "/" }

func (h *harness) writeMeta() error {
	b, err := json.MarshalIndent(h.hist, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.dir, metaFile), b, 0o600)
}

// inject runs fault steps from the seed until the duration is up, and
// returns when the last fault ended. One at a time, each fault is
// followed by a wait until every key has a holder again, so takeovers are
// measured one by one; with Concurrency above one, a new fault starts a
// gap after the last one started, on replicas no other fault is using.
func (h *harness) inject(ctx context.Context) (lastEnd time.Time) {
	pl := newPlanner(h.opts.Seed, h.opts.Timing, h.opts.Keys, h.opts.Faults)
	end := time.Now().Add(h.opts.Duration)
	settleMax := 2*(h.opts.Timing.TTL+h.opts.Timing.Grace) + 2*time.Second
	slots := make(chan struct{}, h.opts.Concurrency)
	var running sync.WaitGroup
	var mu sync.Mutex // lastEnd, which concurrent faults set
	ended := func() {
		mu.Lock()
		lastEnd = time.Now()
		mu.Unlock()
	}
	defer running.Wait() // before lastEnd is returned: faults still running set it
	for ctx.Err() == nil && time.Now().Before(end) {
		s := pl.next()
		if !slices.Contains(h.opts.Faults, s.Fault) {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		targets := h.claim(ctx, s, end)
		if targets == nil {
			<-slots
			continue
		}
		h.hist.Plan = append(h.hist.Plan, s)
		if h.opts.Concurrency == 1 {
			h.apply(ctx, s, targets)
			ended()
			h.unclaim(targets)
			<-slots
			h.replaceCrashed()
			h.settle(ctx, settleMax)
		} else {
			running.Go(func() {
				defer func() { <-slots }()
				h.apply(ctx, s, targets)
				ended()
				h.unclaim(targets)
			})
			h.replaceCrashed()
		}
		_ = sleepCtx(ctx, min(s.Gap, max(time.Until(end), 0)))
	}
	return // lastEnd, once the deferred Wait has let every fault set it
}

// emptyDir makes dir, or checks that it is empty: a run appends to its
// logs, so an earlier run's records would merge with its own into one
// history that makes no sense.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty (it holds %s): name a new directory, or empty it", dir, entries[0].Name())
	}
	return nil
}
