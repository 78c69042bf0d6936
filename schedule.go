package tenure

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/period"
	"github.com/tenure-dev/tenure/store"
)

// Schedule is a parsed schedule for Job.Schedule: see ParseSchedule.
type Schedule struct{ p period.Schedule }

// ParseSchedule parses a schedule: five cron fields ("0 3 * * *"),
// optionally preceded by CRON_TZ=ZONE ("CRON_TZ=Europe/Berlin 0 3 * * *";
// default the local zone), a descriptor (@yearly, @monthly, @weekly,
// @daily, @hourly) or @every DURATION (periods aligned to the Unix epoch,
// so every replica agrees on them).
func ParseSchedule(spec string) (*Schedule, error) {
	p, err := period.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrConfig)
	}
	return &Schedule{p: p}, nil
}

// String is the schedule as given.
func (s *Schedule) String() string { return s.p.String() }

// The records a schedule keeps in the lease table, next to its key:
// key + DoneInfix + the period's start (Unix seconds) once a period's run
// has finished, key + StartedInfix + the start once it began (NoRetry).
const (
	DoneInfix     = "~done/"
	StartedInfix  = "~started/"
	ScheduleOwner = "tenure-schedule"
)

// MaxScheduledKeyBytes is the longest key a scheduled job may have: its
// period records (key + StartedInfix + a start of up to 20 digits) must
// fit in a store key. A longer key's records could not be written, so a
// new holder would run a finished period again, and with NoRetry no
// period would run.
const MaxScheduledKeyBytes = store.MaxKeyBytes - len(StartedInfix) - 20

type periodKey struct{}

// Period reports, in a scheduled job's runner, the start of the period it
// runs for (Job.Schedule): the night a nightly report is about. A run
// taken over within its period, or one that starts late, still gets the
// period's start, not the time it began.
func Period(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(periodKey{}).(time.Time)
	return t, ok
}

// scheduledRunner runs its runner once per period of a schedule, while
// the supervisor holds the key: the holder is the key's scheduler. At each
// period's start — or at once, when it takes the key over within a period
// whose run has not finished — it runs the runner; when the runner returns
// nil it records the period as done in the store, so no holder runs it
// again. A run cut off (the lease lost, a crash) leaves the period undone:
// the next holder runs it again, unless NoRetry, where a record written
// before the run keeps each period's run to at most one start.
type scheduledRunner struct {
	s       *Supervisor
	sched   period.Schedule
	noRetry bool
	inner   Runner
}

func (r scheduledRunner) Run(ctx context.Context, lease Lease) error {
	for {
		now := time.Now()
		if start := r.sched.Current(now); !start.IsZero() {
			if err := r.period(ctx, lease, start); err != nil || ctx.Err() != nil {
				return err
			}
		}
		wait := time.NewTimer(time.Until(r.sched.Next(now)))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil
		case <-wait.C:
		}
	}
}

// period runs the period that began at start, unless it is done (or, with
// NoRetry, started) already.
func (r scheduledRunner) period(ctx context.Context, lease Lease, start time.Time) error {
	key := lease.Key
	done, started, err := r.records(ctx, key, start)
	switch {
	case err != nil:
		return fmt.Errorf("read the schedule's records: %w", err)
	case done || r.noRetry && started:
		return nil
	}
	end := r.sched.Next(start)
	if r.noRetry {
		if err := r.record(ctx, key, StartedInfix, start, end); err != nil {
			return fmt.Errorf("record the start of the period of %s: %w", start.Format(time.RFC3339), err)
		}
	}
	r.s.log.Info("scheduled run starting", "key", key, "epoch", lease.Epoch, "period", start.Format(time.RFC3339))
	if err := runSafely(context.WithValue(ctx, periodKey{}, start), r.inner, lease); err != nil || ctx.Err() != nil {
		return err // a failure is retried with backoff; a stop leaves the period to the next holder
	}
	// The run finished: record it, trying until the period ends, for a
	// run that is not recorded would be run again by the next holder.
	for {
		err := r.record(ctx, key, DoneInfix, start, end)
		if err == nil {
			r.s.log.Info("scheduled run finished", "key", key, "period", start.Format(time.RFC3339), "next", end.Format(time.RFC3339))
			return nil
		}
		r.s.log.Warn("could not record a finished scheduled run; trying again", "key", key, "period", start.Format(time.RFC3339), "err", err)
		retry := time.NewTimer(r.s.cfg.RenewEvery)
		select {
		case <-ctx.Done():
			retry.Stop()
			return nil
		case <-retry.C:
		}
		if !time.Now().Before(end) {
			return nil
		}
	}
}

// records reads whether the period that began at start is done, and
// whether its run has started.
func (r scheduledRunner) records(ctx context.Context, key string, start time.Time) (done, started bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.CallTimeout)
	defer cancel()
	leases, err := r.s.cfg.Store.List(ctx, key+"~")
	if err != nil {
		return false, false, err
	}
	id := strconv.FormatInt(start.Unix(), 10)
	for _, l := range leases {
		if !l.Live || l.Owner != ScheduleOwner {
			continue
		}
		done = done || l.Key == key+DoneInfix+id
		started = started || l.Key == key+StartedInfix+id
	}
	return done, started, nil
}

// record writes the record infix of the period [start, end): it lives
// until the period ends, and a while after for a replica whose clock is
// behind.
func (r scheduledRunner) record(ctx context.Context, key, infix string, start, end time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.CallTimeout)
	defer cancel()
	// The record outlives its period by a period (and a minute): each
	// replica reckons periods on its own wall clock, and one whose clock
	// runs behind this one's must still find the record while it thinks
	// the period goes on. Replicas' clocks may disagree by up to a period.
	ttl := time.Until(end) + end.Sub(start) + time.Minute
	res, err := r.s.cfg.Store.Acquire(ctx, store.AcquireRequest{
		Key: key + infix + strconv.FormatInt(start.Unix(), 10), Owner: ScheduleOwner, TTL: ttl,
	})
	if err == nil && !res.Acquired {
		// Not written is not recorded: the caller retries, or does not run.
		err = fmt.Errorf("the store refused the record: held by %q", res.Holder.Owner)
	}
	return err
}
