package tenure_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// slowAcquire makes the next acquisitions take a while (a busy store).
type slowAcquire struct {
	*readCounter
	slow    atomic.Int32
	mu      sync.Mutex
	wholeAt []time.Time
}

func (s *slowAcquire) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if prefix == "" {
		s.mu.Lock()
		s.wholeAt = append(s.wholeAt, time.Now())
		s.mu.Unlock()
	}
	return s.readCounter.List(ctx, prefix)
}

func (s *slowAcquire) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if s.slow.Add(-1) >= 0 {
		time.Sleep(2 * time.Second)
	}
	return s.readCounter.Acquire(ctx, req)
}

// Config.FullReadEvery at most RenewEvery reads the whole table every
// round, also when one round's acquisition pass is slower than the next
// one's (the age of the last whole read is measured inside the round).
func TestFullReadEveryAtMostRenewEveryReadsTheWholeTableEveryRound(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		s := &slowAcquire{readCounter: &readCounter{Store: st}}
		a := poolWorkerOpts(t, s, "A", tenure.StaticKeys(poolKeys(10)...), newLedger(t), func(c *tenure.Config) { c.FullReadEvery = renew }).start()
		defer a.stop()
		advance(3 * time.Minute)
		s.reads()
		for i := range 6 {
			s.slow.Store(1)
			// A key frees: the acquisition pass that takes it lasts 2s.
			lk := tenure.PoolPrefix + "mail/" + poolKeys(10)[i]
			cur := lease(t, st, lk)
			st.Put(store.Lease{Key: lk, Owner: "X#1", Epoch: cur.Epoch + 1, TimeLeft: -time.Hour})
			advance(time.Minute)
		}
		whole, members := s.reads()
		if members != 0 {
			t.Errorf("FullReadEvery = RenewEvery: %d reads of the memberships alone in 6 minutes (%d whole), want none", members, whole)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for i := 1; i < len(s.wholeAt); i++ {
			if gap := s.wholeAt[i].Sub(s.wholeAt[i-1]); gap > renew+2*time.Second {
				t.Errorf("no whole read from %v to %v (%v) though FullReadEvery = RenewEvery", s.wholeAt[i-1].Format("15:04:05"), s.wholeAt[i].Format("15:04:05"), gap)
			}
		}
	})
}
