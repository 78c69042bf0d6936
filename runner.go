package tenure

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease is what a runner is given: the key it runs for and the term that
// lets it. Pass FenceKey and Epoch to the fence helpers so a downstream
// database can reject writes made after a newer term began.
type Lease struct {
	// Key is the key the runner works on: a pool's key as its source
	// lists it.
	Key string
	// FenceKey is the key to fence writes made for this lease with
	// (package fence): Key for a singleton, and for a pool's key its lease
	// key, in the pool's namespace. Every lease series has its own, so two
	// pools over one set of keys (a pool and a singleton of one name) never
	// share a fence row, where one series' epochs would refuse the other's
	// live holder as stale.
	FenceKey string
	Epoch    int64
	Owner    string

	run *runState // the run this lease was handed to; see StopAt
}

// Runner is the work done for one key while this replica may do it.
//
// Run works until ctx is cancelled — the lease was lost, its deadline is
// near, the key was removed or disabled, or the supervisor is stopping —
// and then returns promptly (within Config.StopTimeout). A return while the
// lease is still held is treated as a failure to run: the supervisor starts
// it again after an exponential backoff, without delaying any other key.
type Runner interface {
	Run(ctx context.Context, lease Lease) error
}

// ErrDone, returned by a runner (or wrapped), says its work is finished:
// the supervisor releases the key's lease and does not start it again
// until the key is Set anew. Any other return while the lease is held is a
// failure and is retried with backoff.
var ErrDone = errors.New("tenure: runner finished")

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, lease Lease) error

// Run calls f(ctx, lease).
func (f RunnerFunc) Run(ctx context.Context, lease Lease) error { return f(ctx, lease) }

// Mode says how many replicas run a key.
type Mode int

const (
	// Exclusive (the default): only the lease holder runs the key.
	Exclusive Mode = iota
	// Everywhere: every replica runs the key, without a lease (a webhook
	// receiver, a local cache warmer).
	Everywhere
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Everywhere:
		return "everywhere"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Job is what a supervisor runs for one key.
type Job struct {
	// Runner does the work. Required unless Reload is set.
	Runner Runner
	// Mode is Exclusive (default) or Everywhere.
	Mode Mode
	// Disabled keeps the key configured but not running: a holder stops
	// its runner and releases the lease.
	Disabled bool
	// Reload, when set, is called after each new term is acquired and
	// before the runner starts, and returns the runner to start. It lets a
	// new holder start from configuration saved since this replica started
	// (rotated credentials, settings changed on a peer). An error counts as
	// a failed start and is retried with backoff.
	Reload func(ctx context.Context, key string) (Runner, error)
	// Schedule, when set, makes the key a scheduled job: its holder runs
	// the runner once per period of the schedule (ParseSchedule) instead
	// of keeping it running, and records each finished period in the
	// store, so each period runs on one replica, once, also across
	// crashes and restarts. A run cut off by a crash or a lost lease is
	// run again by the next holder within its period; a runner that
	// returns an error is retried with backoff within the period. Needs
	// leases and Exclusive mode, and a key of at most MaxScheduledKeyBytes.
	// Periods are reckoned on each replica's wall clock: replicas' clocks
	// may disagree by up to a period (each period's record lives that
	// much past its end).
	Schedule *Schedule
	// NoRetry makes a scheduled key's runs at most once per period: a
	// record written before each run keeps a run cut off by a crash from
	// being run again in its period.
	NoRetry bool
	// MaxFailures, FailureWindow and Cooldown override Config's for this
	// key when not zero: the crash-loop handover (see Config.MaxFailures).
	MaxFailures   int
	FailureWindow time.Duration
	Cooldown      time.Duration
}

// crashLimits are the crash-loop handover's settings of one key.
type crashLimits struct {
	MaxFailures   int
	FailureWindow time.Duration
	Cooldown      time.Duration
}

// reachable reports an error when the backoff spaces MaxFailures failures
// further apart than FailureWindow: the handover could never happen.
func (l crashLimits) reachable(c Config) error {
	if l.MaxFailures <= 1 {
		return nil
	}
	var span time.Duration // from the first failure to the last, at the quickest
	delay := c.BackoffMin
	for range l.MaxFailures - 1 {
		span += delay
		delay = min(2*delay, c.BackoffMax)
	}
	if span >= l.FailureWindow {
		return fmt.Errorf("%d failures take at least %v under the restart backoff (from %v), more than FailureWindow %v: the key would never be handed over; lengthen FailureWindow or lower MaxFailures: %w",
			l.MaxFailures, span, c.BackoffMin, l.FailureWindow, ErrConfig)
	}
	return nil
}

// crashLoop is j's crash-loop settings, Config's where j leaves them zero.
func (j Job) crashLoop(c Config) crashLimits {
	l := crashLimits{MaxFailures: c.MaxFailures, FailureWindow: c.FailureWindow, Cooldown: c.Cooldown}
	if j.MaxFailures != 0 {
		l.MaxFailures = j.MaxFailures
	}
	if j.FailureWindow != 0 {
		l.FailureWindow = j.FailureWindow
	}
	if j.Cooldown != 0 {
		l.Cooldown = j.Cooldown
	}
	return l
}

func (j Job) validate() error {
	if j.Runner == nil && j.Reload == nil {
		return fmt.Errorf("job has neither Runner nor Reload: %w", ErrConfig)
	}
	if j.Mode != Exclusive && j.Mode != Everywhere {
		return fmt.Errorf("job mode %v: %w", j.Mode, ErrConfig)
	}
	if j.NoRetry && j.Schedule == nil {
		return fmt.Errorf("job NoRetry needs a Schedule: %w", ErrConfig)
	}
	if j.Schedule != nil && j.Mode != Exclusive {
		return fmt.Errorf("a scheduled job must be Exclusive: %w", ErrConfig)
	}
	if j.FailureWindow < 0 || j.Cooldown < 0 {
		return fmt.Errorf("job FailureWindow %v and Cooldown %v must not be negative: %w", j.FailureWindow, j.Cooldown, ErrConfig)
	}
	return nil
}
