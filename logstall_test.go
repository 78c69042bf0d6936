package tenure_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A log sink that blocks (a full stderr pipe, a stuck log shipper) must
// cost log lines, never work. Here A's sink stalls, and a renewal fails
// in a blip of the store: the renewal loop logs that, and must retry
// rather than wait for the sink, so A keeps its key past the deadline the
// failed renewal left it. A key set on A meanwhile must
// start, although the loop that acquires it logs as it does.
func TestAStalledLogSinkCostsNoLease(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()))
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: runs.runner("B")})
		b.start()
		defer func() {
			g.open()
			a.stop()
			b.stop()
		}()

		advance(renew) // A's renewal at this moment is confirmed
		g.stall()
		var blip atomic.Bool
		st.SetFault(func(op string) error {
			if op == memstore.OpRenew && blip.CompareAndSwap(false, true) {
				return errors.New("unreachable")
			}
			return nil
		})
		advance(renew) // the next renewal fails, and A logs it to the stalled sink
		a.Set("discord", tenure.Job{Runner: runs.runner("A")})
		advance(3 * (ttl + grace))

		wantNoOverlap(t, runs)
		for _, key := range []string{"telegram", "discord"} {
			got := runs.of(key)
			if len(got) != 1 || got[0].replica != "A" || !got[0].ended.IsZero() {
				t.Fatalf("runs of %s with A's log stalled: %+v, want one run on A, still going", key, got)
			}
		}
	})
}
