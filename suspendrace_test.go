package tenure_test

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// calledFromRenewLoopClock reports whether the staged suspend clock is being
// read by renew's s.loopClock() (the read taken before renew locks s.mu).
func calledFromRenewLoopClock() bool {
	pc := make([]uintptr, 16)
	fr := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	var names []string
	for {
		f, more := fr.Next()
		names = append(names, f.Function)
		if !more || len(names) == 3 {
			break
		}
	}
	return len(names) >= 3 && strings.HasSuffix(names[1], "(*Supervisor).loopClock") &&
		strings.HasSuffix(names[2], "(*Supervisor).renew")
}

// The host suspends after renew() has read the suspend clock but before it
// re-arms the watchdogs; watchSuspend notices the resume first and re-arms
// them on the fresh clock. renew's guard, which then runs with its reading
// from before the suspend, must not move StopAt and the watchdog back
// later: watchSuspend has recorded the suspend and will not look again, so
// the runner would outlive the deadline the keeper holds by the whole
// sleep while the store, whose clock never slept, lets a peer in.
func TestAStaleRenewalClockAfterASuspendDoesNotDelayTheWatchdog(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		const sleep = 15 * time.Second
		var g gate
		var slept atomic.Int64
		var armed atomic.Bool
		var trueAt time.Time
		runner, leases, stopped := leaseRunner()
		var l tenure.Lease
		a := newReplica(t, st, "A", withLogger(g.logger()))
		tenure.StageSuspend(a.Supervisor, func() time.Duration {
			v := time.Duration(slept.Load())
			if armed.Load() && calledFromRenewLoopClock() {
				armed.Store(false)
				slept.Store(int64(sleep))                                            // the host sleeps just after renew read the clock
				time.Sleep(300 * time.Millisecond)                                   // resumes; watchSuspend's tick runs first
				trueAt, _, _ = l.StopAt()                                            // as watchSuspend re-armed it, on the fresh clock
				st.SetFault(func(string) error { return errors.New("unreachable") }) // no later renewal moves it
			}
			return v
		})
		a.Set("telegram", tenure.Job{Runner: runner})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		l = <-leases
		advance(renew + time.Second) // one renewal on an unslept host
		g.stall()                    // the supervision loop, the other deadline path, blocks on its next log
		armed.Store(true)
		advance(renew) // the next renewal races the suspend
		if armed.Load() || trueAt.IsZero() {
			t.Fatal("the staged race did not happen")
		}
		reported, _, ok := l.StopAt()
		t.Logf("true deadline in %v; StopAt reports %v later", time.Until(trueAt), reported.Sub(trueAt))
		if time.Until(trueAt) < 0 {
			t.Fatal("deadline passed already; pick a shorter sleep")
		}
		advance(time.Until(trueAt) + 250*time.Millisecond)
		select {
		case err := <-stopped:
			t.Logf("stopped with %v", err)
		default:
			t.Fatalf("the runner still runs 250ms past the deadline watchSuspend set after the suspend (StopAt now reports %v, ok %v)", reported.Sub(trueAt), ok)
		}
	})
}
