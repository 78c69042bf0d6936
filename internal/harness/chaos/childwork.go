package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/child"
)

// This file runs a key's work the way `tenure run` runs a command: as a
// child process started through internal/cli/child's guard, with the lease's
// safety deadline passed to the guard when the child starts and after
// every confirmed renewal (child.ForwardStopAt, shared with the CLI). The
// child is this binary again, in worker mode (worker.go), doing what the
// in-process workload does and logging it with its pid. A frozen replica
// then leaves its child running, and only the guard can stop it in time:
// the freeze-wrapper fault.

// isChildKey reports whether the work of the key at index i of a run's
// keys runs as a child process: every other key, from the first, so
// every run has one and the other half keeps the cost of a guard and a
// child per held key to what two cores bear.
func isChildKey(i int) bool { return i%2 == 0 }

// childKeyIndex maps a key index drawn from [0, keys) to the index of a
// key whose work runs as a child.
func childKeyIndex(i int) int { return i &^ 1 }

// childKeys are the keys among keys whose work runs as a child.
func childKeys(keys []string) []string {
	var out []string
	for i, k := range keys {
		if isChildKey(i) {
			out = append(out, k)
		}
	}
	return out
}

// What a replica records of its children (evChild's Outcome).
const (
	childStarted  = "started"  // running; Deadline is the one the guard got at start
	childDeadline = "deadline" // a new deadline is being passed to the guard
	childExited   = "exited"   // gone; Cause says why (deadline: the guard's own stop)
	childLate     = "late"     // the deadline passed before the guard could start it
	childFailed   = "failed"   // could not be started
)

// childWork is the runner of a key whose work runs as a child process.
type childWork struct {
	log         *eventLog
	logger      *slog.Logger
	exe         string   // the child: this binary
	args        []string // and its arguments, as this replica got them
	env         []string // the child's environment without the lease's variables
	stopTimeout time.Duration
	// noDeadline starts children without a deadline and forwards none, as
	// `tenure run` did before its guard learned deadlines (tests only).
	noDeadline bool
}

// newChildWork prepares the child runner of a replica: the child is this
// executable, in worker mode.
func newChildWork(spec replicaSpec, log *eventLog, logger *slog.Logger) (*childWork, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("chaos: find this executable for child work: %w", err)
	}
	ws, err := json.Marshal(workerSpec{Replica: spec.Name, Log: spec.Log, Resource: spec.Resource, Seed: spec.Seed,
		Think: 2 * spec.Timing.RenewEvery, LateStop: spec.LateStop})
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(os.Environ())+2)
	race := false
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		race = race || name == "GORACE"
		if name != ReplicaEnv { // a child is no replica
			env = append(env, kv)
		}
	}
	if !race {
		// A -race binary sleeps a second before it exits, and the guard
		// and the child are this binary: the runner would return, and the
		// key be handed over, that much later.
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	env = append(env, workerEnv+"="+string(ws))
	return &childWork{log: log, logger: logger, exe: exe, args: os.Args[1:], env: env,
		stopTimeout: spec.Timing.StopTimeout, noDeadline: spec.ChildNoDeadline}, nil
}

// run starts the child for l through a guard and returns once it is gone:
// stopped when ctx ends (SIGTERM, SIGKILL after the stop timeout), or by
// the guard on its own at the deadline, which this runner cannot do while
// its process is frozen.
func (c *childWork) run(ctx context.Context, l tenure.Lease) error {
	stopAt, _, _ := l.StopAt()
	if c.noDeadline {
		stopAt = time.Time{}
	}
	if ctx.Err() != nil {
		return nil // stopped before it began
	}
	p, err := child.Start(child.Command{Path: c.exe, Args: c.args, Env: c.leaseEnv(l),
		Stdout: os.Stderr, Stderr: os.Stderr, Deadline: stopAt, StopTimeout: c.stopTimeout})
	if err != nil {
		out := childFailed
		if errors.Is(err, child.ErrDeadline) {
			out = childLate
		}
		c.log.add(Event{Ev: evChild, Key: l.Key, Epoch: l.Epoch, Outcome: out, Err: err.Error()})
		return err // retried with backoff while the lease is held
	}
	pid := p.Pid()
	c.log.add(Event{Ev: evChild, Key: l.Key, Epoch: l.Epoch, PID: pid, Outcome: childStarted, Deadline: onSharedClock(stopAt)})
	forwarded := make(chan time.Time, 1)
	if c.noDeadline {
		forwarded <- time.Time{}
	} else {
		src := &recordedLease{Lease: l, log: c.log, pid: pid, last: stopAt}
		go func() { forwarded <- child.ForwardStopAt(src, p, stopAt, c.logger) }()
	}
	enforced := sync.OnceValue(func() time.Time { return <-forwarded }) // the last deadline the guard got
	defer enforced()

	var exit child.Exit
	select {
	case <-p.Done():
		exit, err = p.Exit()
	case <-ctx.Done():
		exit, err = p.Stop(context.Background(), c.stopTimeout)
	}
	e := Event{Ev: evChild, Key: l.Key, Epoch: l.Epoch, PID: pid, Outcome: childExited, Cause: causeName(context.Cause(ctx))}
	switch {
	case exit.Deadline:
		e.Cause = causeDeadline
	case ctx.Err() == nil:
		// It ended on its own: a worker only ends when it is told to.
		e.Cause, e.Err = "exited", exit.String()
		if err != nil {
			e.Err += ": " + err.Error()
		}
	}
	c.log.add(e)
	switch {
	case exit.Deadline:
		// As `tenure run`: a peer may hold the key by now; start again
		// only once the store confirms the lease anew.
		if !child.AwaitRenewal(ctx, l, enforced()) {
			return nil
		}
		return errors.New("chaos: the child was stopped by its guard at the lease's safety deadline")
	case ctx.Err() == nil:
		return fmt.Errorf("chaos: the child's work ended on its own: %s", e.Err)
	}
	return nil
}

// leaseEnv is the child's environment with the lease's variables, named as
// `tenure run` names them for its command.
func (c *childWork) leaseEnv(l tenure.Lease) []string {
	return append(slices.Clip(c.env), "TENURE_KEY="+l.Key,
		"TENURE_EPOCH="+strconv.FormatInt(l.Epoch, 10), "TENURE_OWNER="+l.Owner)
}

// recordedLease records each new deadline as ForwardStopAt reads it, just
// before passing it to the guard: what the report measures a guard's stop
// against.
type recordedLease struct {
	tenure.Lease
	log  *eventLog
	pid  int
	last time.Time // read by ForwardStopAt's goroutine alone
}

func (r *recordedLease) StopAt() (time.Time, <-chan struct{}, bool) {
	at, changed, ok := r.Lease.StopAt()
	if ok && !at.Equal(r.last) {
		r.last = at
		r.log.add(Event{Ev: evChild, Key: r.Key, Epoch: r.Epoch, PID: r.pid, Outcome: childDeadline, Deadline: onSharedClock(at)})
	}
	return at, changed, ok
}

// onSharedClock converts a time.Time (with its monotonic reading) to the
// shared clock of the history; the zero time is 0.
func onSharedClock(at time.Time) int64 {
	if at.IsZero() {
		return 0
	}
	return Now() + int64(time.Until(at))
}
