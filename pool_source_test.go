package tenure_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A replica whose key source does not answer (a command missing on one
// host, a database it cannot reach) can run none of the pool's keys.
// Counted as a member, it took a share: the healthy replica stopped
// claiming at its own cap, so 9 of 20 keys ran nowhere, and the keys the
// broken one prefers were handed to it, never claimed, and taken back,
// again and again. It joins the pool only once it has read its keys, and
// then takes its share.
func TestAReplicaThatCannotReadItsKeysTakesNoShareUntilItCan(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		keys := poolKeys(20)
		l := newLedger(t)
		good := poolWorker(t, st, "good", tenure.StaticKeys(keys...), l)
		var mended atomic.Bool
		broken := poolWorker(t, st, "broken", tenure.KeySourceFunc(func(context.Context) ([]string, error) {
			if !mended.Load() {
				return nil, errors.New("psql: command not found")
			}
			return keys, nil
		}), l)
		good.start()
		defer good.stop()
		broken.start()
		defer broken.stop()
		advance(20 * renew)
		if n := l.total(); n != len(keys) {
			t.Errorf("%d of %d keys run, on %v; want every key run by the replica that can read them", n, len(keys), l.perOwner())
		}
		for _, k := range keys {
			if n := l.starts[k]; n != 1 {
				t.Errorf("key %s started %d times; want once", k, n)
			}
		}
		mended.Store(true)
		if err := broken.RefreshPool("mail"); err != nil {
			t.Fatal(err)
		}
		advance(20 * renew) // a round to join, then hand-overs after the minimum hold
		if got := l.perOwner(); l.total() != len(keys) || got["broken"] < 9 || got["good"] < 9 {
			t.Errorf("once the source answers: %d of %d keys run, on %v; want both replicas within their band", l.total(), len(keys), got)
		}
	})
}

// Run starts each pool's reading of its source, so a pool added while it
// runs was never read: AddPool returned nil and the pool ran nothing,
// without a word. It is refused.
func TestAPoolAddedWhileRunningIsRefused(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		w := newReplica(t, st, "w0").start()
		defer w.stop()
		err := w.AddPool(tenure.Pool{Name: "mail", Source: tenure.StaticKeys("a"), Runner: newLedger(t).runner()})
		if !errors.Is(err, tenure.ErrConfig) {
			t.Errorf("AddPool while running: %v; want an error wrapping ErrConfig", err)
		}
	})
}
