package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/child"
	"github.com/tenure-dev/tenure/internal/logqueue"
)

// ReplicaEnv is the environment variable that turns a process into a
// replica: it holds the replica's spec (JSON), written by the harness.
const ReplicaEnv = "TENURE_CHAOS_REPLICA"

// beatEvery is how often a running runner records that it still works.
const beatEvery = 100 * time.Millisecond

// replicaSpec is everything a replica process needs, passed in ReplicaEnv.
type replicaSpec struct {
	Name string `json:"name"`
	// Owner is Config.Owner: unique per replica, except for the extra
	// replica of a same-owner fault.
	Owner    string       `json:"owner"`
	Store    backend      `json:"store"`
	Keys     []string     `json:"keys"`
	Prefix   string       `json:"prefix"`
	Timing   Timing       `json:"timing"`
	Log      string       `json:"log"`
	Control  string       `json:"control,omitempty"` // the fault control file (recorder.go)
	Resource resourceSpec `json:"resource"`
	Seed     uint64       `json:"seed"`
	// LateStop breaks the runner on purpose (tests only): it keeps working
	// that long after its context ends.
	LateStop time.Duration `json:"late_stop,omitempty"`
	// IDSuffix is appended to Config.Owner (tests only): it stands in for
	// an engine whose owner ids are unique per process start, so a test
	// shows the harness never takes the configured name for the store's id.
	IDSuffix string `json:"id_suffix,omitempty"`
	// Children are the keys whose work runs as a child process through a
	// guard, as `tenure run` runs a command (childwork.go).
	Children []string `json:"children,omitempty"`
	// ChildNoDeadline starts those children without a safety deadline for
	// their guard (tests only): the guard of `tenure run` before it
	// learned deadlines, which a frozen wrapper's child outlives.
	ChildNoDeadline bool `json:"child_no_deadline,omitempty"`
	// Pool are the keys of the run's pool, if it has one (pool.go).
	Pool []string `json:"pool,omitempty"`
	// SourceDown is a file whose existence makes the pool's key source
	// fail (the source-down fault).
	SourceDown string `json:"source_down,omitempty"`
	// PoolMaxKeys is the pool's MaxKeys (the low-max fault).
	PoolMaxKeys int `json:"pool_max_keys,omitempty"`
}

// IsReplica reports whether this process was started by the harness as a
// replica; if so, call ReplicaMain and exit with its code:
//
//	func TestMain(m *testing.M) {
//		if chaos.IsReplica() {
//			os.Exit(chaos.ReplicaMain())
//		}
//		os.Exit(m.Run())
//	}
//
// The same call serves the processes a replica starts in turn for the
// keys whose work runs as a child, which get workerEnv: the child itself,
// and its guard (internal/cli/child), which is this binary too.
func IsReplica() bool { return os.Getenv(ReplicaEnv) != "" || os.Getenv(workerEnv) != "" }

// ReplicaMain runs one replica from the spec in ReplicaEnv until SIGTERM
// or SIGINT (a graceful shutdown: runners stop, leases are released) and
// returns the process's exit code. The harness also kills replicas with
// SIGKILL and freezes them with SIGSTOP; everything they do is in their
// log.
func ReplicaMain() int {
	child.RunGuardIfRequested() // exits when this is a child's guard
	if os.Getenv(workerEnv) != "" {
		return workerMain()
	}
	var spec replicaSpec
	if err := json.Unmarshal([]byte(os.Getenv(ReplicaEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "chaos replica: %s: %v\n", ReplicaEnv, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runReplica(ctx, spec); err != nil {
		fmt.Fprintf(os.Stderr, "chaos replica %s: %v\n", spec.Name, err)
		return 1
	}
	return 0
}

func runReplica(ctx context.Context, spec replicaSpec) error {
	log, err := openLog(spec.Log, spec.Name)
	if err != nil {
		return err
	}
	defer log.close()

	st, err := openRetrying(ctx, spec.Store)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := openResource(ctx, spec.Resource)
	if err != nil {
		return err
	}
	defer res.close()

	gate := newLogGate()
	logger := slog.New(gatedHandler{gate: gate,
		inner: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})})
	t := spec.Timing
	sup, err := tenure.New(tenure.Config{
		Store:       record(st, log, control(spec.Control)),
		Leases:      tenure.LeasesOn,
		Owner:       spec.Owner + spec.IDSuffix,
		TTL:         t.TTL,
		Grace:       t.Grace,
		RenewEvery:  t.RenewEvery,
		CallTimeout: t.CallTimeout,
		StopTimeout: t.StopTimeout,
		Prefix:      spec.Prefix,
		Logger:      logger.With("replica", spec.Name),
	})
	if err != nil {
		return err
	}
	// The harness signals a replica only once this record is written, so
	// the gate's signals never meet a process that would die of them. The
	// owner id is the supervisor's, which the store sees; it need not be
	// the configured name.
	defer gate.follow(log)()
	log.add(Event{Ev: evProc, PID: os.Getpid(), Owner: sup.Owner(), Configured: spec.Owner})
	w := &workload{log: log, res: res, think: 2 * t.RenewEvery, seed: spec.Seed, lateStop: spec.LateStop}
	// As tenure run's runner does, the child work's logs through a queue:
	// a runner that waited on a stalled log could not hand its key over.
	childLogs := logqueue.New(logqueue.DefaultSize, nil)
	childLogs.Start()
	defer childLogs.Stop(t.StopTimeout)
	cw, err := newChildWork(spec, log, slog.New(childLogs.Handler(logger.Handler())).With("replica", spec.Name))
	if err != nil {
		return err
	}
	for _, key := range spec.Keys {
		run := w.run
		if slices.Contains(spec.Children, key) {
			run = cw.run
		}
		if err := sup.Set(key, tenure.Job{Runner: tenure.RunnerFunc(run)}); err != nil {
			return err
		}
	}
	if len(spec.Pool) > 0 {
		if err := sup.AddPool(chaosPool(spec, w)); err != nil {
			return err
		}
	}
	err = sup.Run(ctx)
	e := Event{Ev: evExit}
	if err != nil {
		e.Err = err.Error()
	}
	log.add(e)
	return err
}

// openRetrying opens the store, retrying for a while: a replacement
// replica may start while the store is briefly unreachable.
func openRetrying(ctx context.Context, b backend) (closingStore, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := b.open(octx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return st, err
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// workload is the runner every key runs.
type workload struct {
	log   *eventLog
	res   resource
	think time.Duration
	seed  uint64
	// lateStop: see replicaSpec.LateStop.
	lateStop time.Duration
	// pid marks every record of work done in a child process (worker.go)
	// with that process; 0 in the replica's own.
	pid int
}

// run records the work's start, a heartbeat while it lasts, and its stop
// the moment the context ends; meanwhile a writer makes fenced writes.
func (w *workload) run(ctx context.Context, l tenure.Lease) error {
	w.log.add(Event{Ev: evStart, Key: l.Key, Epoch: l.Epoch, PID: w.pid})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		w.writeLoop(ctx, l)
	}()
	beat := time.NewTicker(beatEvery)
	defer beat.Stop()
	var late <-chan time.Time
	done := ctx.Done()
	for working := true; working; {
		select {
		case <-done:
			if w.lateStop <= 0 {
				working = false
			}
			done, late = nil, time.After(w.lateStop)
		case <-late:
			working = false
		case <-beat.C:
			w.log.add(Event{Ev: evBeat, Key: l.Key, Epoch: l.Epoch, PID: w.pid})
		}
	}
	w.log.add(Event{Ev: evStop, Key: l.Key, Epoch: l.Epoch, PID: w.pid, Cause: causeName(context.Cause(ctx))})
	// The writer may still be finishing a write it had decided on; the
	// lease is released only once it has.
	<-writerDone
	return nil
}

// writeLoop reads, thinks, and writes with the lease's epoch until the
// context ends. The think time ignores the context on purpose: a write
// already decided on goes out even after the lease is gone, as it would
// from a process that was frozen mid-write, and only the fence stops it.
func (w *workload) writeLoop(ctx context.Context, l tenure.Lease) {
	h := fnv.New64a()
	h.Write([]byte(l.Key))
	rng := rand.New(rand.NewPCG(w.seed, h.Sum64()^uint64(l.Epoch)))
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.res.read(rctx, l.Key)
		cancel()
		if err != nil {
			_ = sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		time.Sleep(time.Duration(rng.Int64N(int64(w.think) + 1)))
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		began := Now()
		res, err := w.res.write(wctx, l.Key, l.Epoch, l.Owner)
		cancel()
		e := Event{Ev: evWrite, Key: l.Key, Epoch: l.Epoch, PID: w.pid, Sent: began}
		switch {
		case err != nil:
			e.Outcome, e.Err = outError, err.Error()
		case res.accepted:
			e.Outcome, e.Seq, e.Prev = outAccepted, res.seq, res.prev
		default:
			e.Outcome, e.Cur = outRejected, res.cur
		}
		w.log.add(e)
	}
}

// Stop causes as the checker names them.
const (
	causeDeadline = "deadline"
	causeLost     = "lost"
	causeStopping = "stopping"
	// causeKilled ends every interval of a replica the harness killed,
	// at its exit.
	causeKilled = "killed"
)

func causeName(err error) string {
	switch {
	case errors.Is(err, tenure.ErrDeadline):
		return causeDeadline
	case errors.Is(err, tenure.ErrLeaseLost):
		return causeLost
	case errors.Is(err, tenure.ErrStopping):
		return causeStopping
	case errors.Is(err, tenure.ErrKeyRemoved):
		return "removed"
	case errors.Is(err, tenure.ErrRebalance):
		return "rebalance"
	case errors.Is(err, tenure.ErrRestart):
		return "restart"
	case err == nil:
		return ""
	}
	return err.Error()
}
