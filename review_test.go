package tenure_test

// Tests written by the engine review of the day's changes: each pins a
// behaviour doc.go promises and the code did not keep.

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A replica whose host once slept (its deadline clock runs ahead of
// time.Now by the time slept) must still take over a crashed peer's key at
// expiry + grace: the retry time of a refused acquisition is on the
// keeper's clock and must not be compared with time.Now, or every retry
// is pushed back by the whole time the host ever slept.
func TestAReplicaWhoseHostOnceSleptTakesOverAtExpiryPlusGrace(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &partition{Store: st}
		a := newReplica(t, cut, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		defer a.stop()
		advance(3 * time.Second)
		b := newReplica(t, st, "B")
		tenure.StageSuspend(b.Supervisor, func() time.Duration { return time.Hour }) // slept an hour before this test
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()

		advance(renew)
		lastRenewal := time.Now().Add(-3 * time.Second)
		cut.cut.Store(true) // A crashes
		advance(ttl + grace + renew)
		got := b.rec.startsOf("telegram")
		if len(got) != 1 {
			t.Fatalf("B started telegram %d times in TTL + grace + RenewEvery after A's crash, want once", len(got))
		}
		if took := got[0].at.Sub(lastRenewal); took != ttl+grace {
			t.Fatalf("B took over %v after A's last renewal, want TTL + grace = %v", took, ttl+grace)
		}
	})
}

// The suspend path is a deadline path: on resume, runners whose deadline
// passed while the host slept stop at once, and — like the watchdog — it
// must not wait on a log handler first (doc.go: a blocked log handler
// cannot delay the cancellation).
func TestAStalledLogSinkNeverDelaysTheStopAfterAHostSuspend(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		var slept atomic.Int64
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()))
		tenure.StageSuspend(a.Supervisor, func() time.Duration { return time.Duration(slept.Load()) })
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		advance(renew + time.Second)
		g.stall()
		slept.Store(int64(time.Hour)) // the host slept an hour and resumes now
		resumed := time.Now()
		advance(time.Second)
		got := runs.of("telegram")
		if len(got) == 0 || got[0].ended.IsZero() {
			t.Fatalf("runs %+v: with the log sink stalled, the runner outlived a deadline that passed while the host slept", got)
		}
		if d := got[0].ended.Sub(resumed); d > 250*time.Millisecond || !errors.Is(got[0].cause, tenure.ErrDeadline) {
			t.Fatalf("the runner stopped %v after the resume with %v, want within 250ms with ErrDeadline", d, got[0].cause)
		}
	})
}
