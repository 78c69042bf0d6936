package tenure_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// readCounter counts a replica's reads of the lease table: whole (the
// namespace) or of the pools' memberships alone. It keeps the memstore's
// push channel.
type readCounter struct {
	*memstore.Store
	mu             sync.Mutex
	whole, members int
	// afterWhole, when set, runs once a whole read has read the table and
	// before it answers.
	afterWhole func()
}

func (c *readCounter) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	c.mu.Lock()
	switch {
	case prefix == "":
		c.whole++
	case strings.Contains(prefix, tenure.WorkerPrefix):
		c.members++
	}
	after := c.afterWhole
	c.mu.Unlock()
	leases, err := c.Store.List(ctx, prefix)
	if prefix == "" && after != nil {
		after()
	}
	return leases, err
}

// reads returns the counts since the last call.
func (c *readCounter) reads() (whole, members int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	whole, members = c.whole, c.members
	c.whole, c.members = 0, 0
	return whole, members
}

func TestAPoolWorkerOnAPushStoreReadsTheWholeTableOnlyEveryFullReadEvery(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		reads := &readCounter{Store: st}
		a := poolWorkerOpts(t, reads, "A", tenure.StaticKeys(poolKeys(40)...), newLedger(t)).start()
		defer a.stop()
		advance(5 * time.Minute)
		if got := a.Pools()[0].Held; got != 40 {
			t.Fatalf("A holds %d of the pool's 40 keys", got)
		}

		reads.reads()
		advance(5 * time.Minute) // 30 rounds
		whole, members := reads.reads()
		if whole > 6 || members < 24 {
			t.Errorf("in 5 minutes of a pool alone: %d whole reads and %d of the memberships; want at most 6 whole (one a minute)", whole, members)
		}

		// A singleton needs the whole table: its peers and its controls.
		if err := a.Set("report", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error { <-ctx.Done(); return nil })}); err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
		reads.reads()
		advance(time.Minute) // 6 rounds
		if whole, members := reads.reads(); whole < 6 || members != 0 {
			t.Errorf("in a minute with a singleton beside the pool: %d whole reads and %d of the memberships; want every round whole", whole, members)
		}
	})
}

func TestAPoolWorkerReadsTheWholeTableWhileAPeerHoldsASingletonInItsNamespace(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		reads := &readCounter{Store: st}
		a := poolWorkerOpts(t, reads, "A", tenure.StaticKeys(poolKeys(10)...), newLedger(t)).start()
		defer a.stop()
		advance(3 * time.Minute)

		b := newReplica(t, st, "B")
		b.Set("report", tenure.Job{Runner: tenure.RunnerFunc(func(ctx context.Context, _ tenure.Lease) error { <-ctx.Done(); return nil })})
		b.start()
		advance(time.Second)
		reads.reads()
		advance(time.Minute)
		if whole, _ := reads.reads(); whole < 6 {
			t.Errorf("%d whole reads in a minute while B holds a singleton in A's namespace; want every round (6)", whole)
		}
		if s := a.KeyStatus("report"); tenure.OwnerName(s.Leader) != "B" || !s.Running {
			t.Errorf("A's status of B's singleton: %+v", s)
		}

		// Once B is gone, A follows its pool again.
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
		advance(2 * time.Minute)
		reads.reads()
		advance(2 * time.Minute)
		if whole, members := reads.reads(); whole > 3 || members < 9 {
			t.Errorf("after B left: %d whole reads and %d of the memberships in 2 minutes; want at most 3 whole", whole, members)
		}
	})
}

// gappyWatch is a push channel into which a test slips events of its own,
// such as the Missed event of a reader that fell behind.
type gappyWatch struct {
	*readCounter
	inject chan store.Event
}

func (g *gappyWatch) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	in, err := g.Store.Watch(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make(chan store.Event)
	go func() {
		defer close(out)
		for {
			var ev store.Event
			select {
			case e, open := <-in:
				if !open {
					return
				}
				ev = e
			case ev = <-g.inject:
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func TestAPoolWorkerThatMissedEventsReadsTheWholeTableAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		reads := &gappyWatch{readCounter: &readCounter{Store: st}, inject: make(chan store.Event)}
		a := poolWorkerOpts(t, reads, "A", tenure.StaticKeys(poolKeys(10)...), newLedger(t), func(c *tenure.Config) { c.FullReadEvery = time.Hour }).start()
		defer a.stop()
		advance(3 * time.Minute)
		reads.reads()
		advance(time.Minute)
		if whole, members := reads.reads(); whole != 0 || members < 5 {
			t.Fatalf("following: %d whole reads and %d of the memberships in a minute", whole, members)
		}
		reads.inject <- store.Event{Kind: store.Missed}
		advance(time.Second)
		if whole, _ := reads.reads(); whole != 1 {
			t.Errorf("%d whole reads a second after the push channel said events were missed; want 1, at once", whole)
		}
	})
}

func TestAWholeReadThatBeganBeforeEventsWereMissedDoesNotMakeTheViewCurrent(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		reads := &gappyWatch{readCounter: &readCounter{Store: st}, inject: make(chan store.Event)}
		a := poolWorkerOpts(t, reads, "A", tenure.StaticKeys(poolKeys(10)...), newLedger(t), func(c *tenure.Config) { c.FullReadEvery = time.Hour }).start()
		defer a.stop()
		advance(3 * time.Minute)

		read, resume := make(chan struct{}), make(chan struct{})
		reads.mu.Lock()
		reads.afterWhole = func() {
			reads.mu.Lock()
			reads.afterWhole = nil
			reads.mu.Unlock()
			close(read)
			<-resume
		}
		reads.mu.Unlock()
		reads.reads()
		reads.inject <- store.Event{Kind: store.Missed} // a whole read begins
		<-read
		reads.inject <- store.Event{Kind: store.Missed} // more missed while it is in flight
		synctest.Wait()                                 // and heard of
		reads.reads()
		close(resume)
		advance(time.Second)
		if whole, _ := reads.reads(); whole != 1 {
			t.Errorf("%d whole reads after the one in flight when events were missed again; want 1", whole)
		}
	})
}
