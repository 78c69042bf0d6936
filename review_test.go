package tenure_test

// Tests written by the engine review of the day's changes: each pins a
// behaviour doc.go promises and the code did not keep.

import (
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
