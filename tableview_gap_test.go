package tenure_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// subGate holds back a replica's subscription until subscribe is closed, and
// can pause one read of the table after it has read the store (an answer
// on its way back) until resume is closed.
type subGate struct {
	*memstore.Store
	subscribe chan struct{}
	mu        sync.Mutex
	pause     bool
	listed    chan struct{}
	resume    chan struct{}
}

func (g *subGate) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	select {
	case <-g.subscribe:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Store.Watch(ctx, prefix)
}

func (g *subGate) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	leases, err := g.Store.List(ctx, prefix)
	g.mu.Lock()
	pause := g.pause && prefix == ""
	g.pause = false
	g.mu.Unlock()
	if pause {
		close(g.listed)
		<-g.resume
	}
	return leases, err
}

// srcFunc is a key source a test can change.
type srcFunc struct {
	mu   sync.Mutex
	keys []string
}

func (s *srcFunc) Keys(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys), nil
}

// A whole read that was in flight when the subscription came up predates
// it: what changed between its answer and the subscription must be read
// again at once, not a FullReadEvery later. It happens at every start, as
// the first round and the subscription race.
func subscribedDuringARead(t *testing.T, st *memstore.Store, fullReadEvery time.Duration) time.Duration {
	l := newLedger(t)
	keys := poolKeys(10)
	bsrc := &srcFunc{keys: keys}
	opt := func(c *tenure.Config) { c.FullReadEvery = fullReadEvery }
	b := poolWorkerOpts(t, st, "B", bsrc, l, opt).start()
	defer b.stop()
	advance(4 * renew)

	g := &subGate{Store: st, subscribe: make(chan struct{}), pause: true, listed: make(chan struct{}), resume: make(chan struct{})}
	a := poolWorkerOpts(t, g, "A", tenure.StaticKeys(keys...), l, opt).start()
	defer a.stop()
	<-g.listed // A's first whole read has its answer, not yet returned

	// B stops wanting acct-0003 (its source changed first) and releases it.
	bsrc.mu.Lock()
	bsrc.keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "acct-0003" })
	bsrc.mu.Unlock()
	b.RefreshPool("mail")
	advance(0)
	close(g.subscribe) // A's subscription comes up
	advance(0)
	close(g.resume) // and only then does the read return
	advance(0)
	start := time.Now()
	for time.Since(start) < 3*time.Minute {
		advance(time.Second)
		if l.total() == 10 {
			break
		}
	}
	return time.Since(start)
}

func TestASubscriptionThatComesUpDuringAWholeReadIsNotFollowedWithAGap(t *testing.T) {
	var every, following time.Duration
	bubble(t, func(t *testing.T, st *memstore.Store) { every = subscribedDuringARead(t, st, renew) })
	bubble(t, func(t *testing.T, st *memstore.Store) { following = subscribedDuringARead(t, st, 0) })
	t.Logf("every key ran again after %v reading every round, %v following", every, following)
	if following > every+renew {
		t.Errorf("following: a released key ran nowhere for %v (every round: %v)", following, every)
	}
}
