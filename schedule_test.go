package tenure_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// periodRuns records every scheduled run across replicas: who ran it and
// in which minute it began.
type periodRuns struct {
	mu   sync.Mutex
	runs []periodRun
	busy int
	t    *testing.T
}

type periodRun struct {
	owner string
	at    time.Time
}

func (p *periodRuns) runner(owner string, d time.Duration) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error {
		p.mu.Lock()
		p.runs = append(p.runs, periodRun{owner, time.Now()})
		p.busy++
		if p.busy > 1 {
			p.t.Errorf("two scheduled runs at once at %v", time.Now())
		}
		p.mu.Unlock()
		defer func() { p.mu.Lock(); p.busy--; p.mu.Unlock() }()
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

func (p *periodRuns) perMinute() map[time.Time]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[time.Time]int{}
	for _, r := range p.runs {
		out[r.at.Truncate(time.Minute)]++
	}
	return out
}

func scheduled(t *testing.T, spec string) *tenure.Schedule {
	t.Helper()
	s, err := tenure.ParseSchedule(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAScheduledJobRunsOncePerPeriodOnOneReplica(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &periodRuns{t: t}
		every := scheduled(t, "@every 1m")
		for _, name := range []string{"A", "B", "C"} {
			r := newReplica(t, st, name)
			if err := r.Set("report", tenure.Job{Runner: runs.runner(name, 5*time.Second), Schedule: every}); err != nil {
				t.Fatal(err)
			}
			r.start()
			defer r.stop()
		}
		begin := time.Now()
		advance(10*time.Minute - time.Second)
		perMinute := runs.perMinute()
		if len(perMinute) != 10 {
			t.Fatalf("runs began in %d distinct minutes over 10 minutes, want 10: %v", len(perMinute), perMinute)
		}
		for m, n := range perMinute {
			if n != 1 || m.Before(begin.Truncate(time.Minute)) {
				t.Errorf("minute %v: %d runs, want 1", m, n)
			}
		}
		// Each run began at its period's start, but the first (taken at once).
		for i, r := range runs.runs[1:] {
			if r.at.Sub(r.at.Truncate(time.Minute)) > time.Second {
				t.Errorf("run %d began %v into its minute", i+1, r.at.Sub(r.at.Truncate(time.Minute)))
			}
		}
	})
}

// testCrashInAPeriod cuts the replica running a scheduled job off in the
// middle of a run (a crash) and counts the runs of that period.
func testCrashInAPeriod(t *testing.T, noRetry bool) int {
	var inPeriod int
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &periodRuns{t: t}
		hourly := scheduled(t, "@hourly")
		cut := &testenv.Partition{Store: st}
		a := newReplica(t, cut, "A")
		a.Set("report", tenure.Job{Runner: runs.runner("A", 10*time.Minute), Schedule: hourly, NoRetry: noRetry})
		a.start()
		defer a.stop()
		advance(time.Second)
		b := newReplica(t, st, "B")
		b.Set("report", tenure.Job{Runner: runs.runner("B", 10*time.Minute), Schedule: hourly, NoRetry: noRetry})
		b.start()
		defer b.stop()
		advance(time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)) + 2*time.Minute) // into the next hour's run
		cut.Cut.Store(true)                                                                // A dies mid-run
		advance(20 * time.Minute)
		hour := time.Now().Truncate(time.Hour)
		for _, r := range runs.runs {
			if !r.at.Before(hour) {
				inPeriod++
			}
		}
	})
	return inPeriod
}

func TestARunCutOffByACrashIsRetriedByAPeerInItsPeriod(t *testing.T) {
	if n := testCrashInAPeriod(t, false); n != 2 {
		t.Fatalf("%d runs in the period of the crash, want 2: the cut-off run and the peer's retry", n)
	}
}

func TestWithNoRetryAPeriodRunsAtMostOnceEvenAcrossACrash(t *testing.T) {
	if n := testCrashInAPeriod(t, true); n != 1 {
		t.Fatalf("%d runs in the period of the crash, want 1", n)
	}
}

func TestScheduleSettingsAreValidated(t *testing.T) {
	if _, err := tenure.ParseSchedule("61 * * * *"); err == nil {
		t.Error("ParseSchedule of a bad spec: nil error")
	}
	runner := tenure.RunnerFunc(func(context.Context, tenure.Lease) error { return nil })
	local, err := tenure.New(tenure.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Set("k", tenure.Job{Runner: runner, Schedule: scheduled(t, "@daily")}); err == nil {
		t.Error("a schedule without leases: nil error")
	}
	sup, err := tenure.New(tenure.Config{Store: memstore.New(memstore.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	for name, job := range map[string]tenure.Job{
		"NoRetry without a schedule": {Runner: runner, NoRetry: true},
		"a schedule Everywhere":      {Runner: runner, Schedule: scheduled(t, "@daily"), Mode: tenure.Everywhere},
	} {
		if err := sup.Set("k", job); err == nil {
			t.Errorf("%s: nil error", name)
		}
	}
	if err := sup.Set("k"+tenure.DoneInfix+"1", tenure.Job{Runner: runner}); err == nil {
		t.Error("a key holding a record infix: nil error")
	}
	long := strings.Repeat("k", tenure.MaxScheduledKeyBytes)
	if err := sup.Set(long, tenure.Job{Runner: runner, Schedule: scheduled(t, "@daily")}); err != nil {
		t.Errorf("a scheduled key of %d bytes: %v", len(long), err)
	}
	if err := sup.Set(long+"k", tenure.Job{Runner: runner, Schedule: scheduled(t, "@daily")}); !errors.Is(err, tenure.ErrConfig) {
		t.Errorf("a scheduled key too long for its period records: %v, want ErrConfig", err)
	}
	if err := sup.Set(long+"k", tenure.Job{Runner: runner}); err != nil {
		t.Errorf("the same key without a schedule: %v", err)
	}
}

// A schedule record the store refuses is not taken as written: with
// NoRetry, a period whose start could not be recorded does not run (a
// failover quarantine, or a term of another owner on the record's key).
func TestARefusedScheduleRecordIsNotTakenAsWritten(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &periodRuns{t: t}
		start := time.Now().Truncate(time.Hour)
		key := "report" + tenure.StartedInfix + strconv.FormatInt(start.Unix(), 10)
		res, err := st.Acquire(t.Context(), store.AcquireRequest{Key: key, Owner: "intruder", TTL: 2 * time.Hour})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%q): %+v, %v", key, res, err)
		}
		r := newReplica(t, st, "A")
		if err := r.Set("report", tenure.Job{Runner: runs.runner("A", time.Second), Schedule: scheduled(t, "0 * * * *"), NoRetry: true}); err != nil {
			t.Fatal(err)
		}
		r.start()
		defer r.stop()
		advance(10 * time.Minute)
		if n := len(runs.perMinute()); n != 0 {
			t.Errorf("the period ran (%d runs) though its start could not be recorded", n)
		}
	})
}

// Each replica reckons a schedule's periods on its own wall clock. A
// period's records lived a minute past its end by the clock of the
// replica that wrote them, so a peer whose clock ran more than a minute
// behind found no record while it thought the period went on, and ran
// it again. They live a whole period longer.
func TestAPeriodsRecordOutlivesItByAPeriod(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &periodRuns{t: t}
		a := newReplica(t, st, "A")
		if err := a.Set("report", tenure.Job{Runner: runs.runner("A", time.Minute), Schedule: scheduled(t, "@hourly")}); err != nil {
			t.Fatal(err)
		}
		a.start()
		defer a.stop()
		advance(time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)) + 10*time.Minute) // the next hour's run is done
		end := time.Now().Truncate(time.Hour).Add(time.Hour)
		var done *store.Lease
		for _, l := range testenv.List(t, st, "") {
			if strings.HasPrefix(l.Key, "report"+tenure.DoneInfix) {
				done = &l
			}
		}
		if done == nil {
			t.Fatal("no record of the finished period")
		}
		if want := time.Until(end) + time.Hour; done.TimeLeft < want {
			t.Errorf("the period's record has %v left, want at least %v: until a period past the period's end", done.TimeLeft, want)
		}
	})
}
