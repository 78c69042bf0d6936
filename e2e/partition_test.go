package e2e_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// errPartitioned is what every call through a cut partition returns.
var errPartitioned = errors.New("e2e: partitioned from the store")

// partition is the Store one replica uses, with a switch that cuts it off.
//
// After Cut, every call fails, and a call already in flight has its answer
// turned into a failure, as a network partition would do: the replica can
// neither renew nor release. That is how a crashed or frozen process looks
// to its peers — cancelling its Run instead would release its leases.
//
// It also records what the engine did through it: the send time of the last
// confirmed grant or renewal of each key (taken just before the call goes
// to the store, so never earlier than the engine's own send time), every
// Release call, refused acquisitions, and, when asked, each call's duration.
type partition struct {
	st  store.Store
	cut atomic.Bool
	// watchDelay holds every Watch call back before it subscribes, as a
	// slow connection to a remote store would.
	watchDelay time.Duration
	watching   atomic.Int32 // subscriptions made
	watchedAt  atomic.Pointer[time.Time]

	// Hooks for a child process, which reports them to its parent.
	onRelease func(at time.Time)
	onRefused func()

	mu        sync.Mutex
	confirmed map[string]time.Time
	releases  []time.Time
	refusals  int
	recording bool
	calls     []call
}

// call is one recorded store call.
type call struct {
	op    string // "renew" or "list"
	start time.Time
	took  time.Duration
	n     int // items renewed or leases listed
}

var (
	_ store.Store   = (*partition)(nil)
	_ store.Watcher = (*partition)(nil)
)

func newPartition(st store.Store) *partition {
	return &partition{st: st, confirmed: map[string]time.Time{}}
}

// Cut partitions the replica from the store and returns the moment it did.
func (p *partition) Cut() time.Time {
	p.cut.Store(true)
	return time.Now()
}

// Heal ends the partition.
func (p *partition) Heal() { p.cut.Store(false) }

// Confirmed is the send time of key's last confirmed grant or renewal.
func (p *partition) Confirmed(key string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.confirmed[key]
}

// Releases returns the entry time of every Release call so far.
func (p *partition) Releases() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.releases...)
}

// Refusals counts acquisitions refused because a peer held the key.
func (p *partition) Refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refusals
}

// Record turns the recording of call durations on or off and returns the
// calls recorded since the last time it was turned on.
func (p *partition) Record(on bool) []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.calls
	p.recording, p.calls = on, nil
	return out
}

func (p *partition) record(op string, start time.Time, n int) {
	took := time.Since(start)
	p.mu.Lock()
	if p.recording {
		p.calls = append(p.calls, call{op: op, start: start, took: took, n: n})
	}
	p.mu.Unlock()
}

func (p *partition) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if p.cut.Load() {
		return store.AcquireResult{}, errPartitioned
	}
	sent := time.Now()
	res, err := p.st.Acquire(ctx, req)
	if p.cut.Load() {
		return store.AcquireResult{}, errPartitioned
	}
	if err != nil {
		return res, err
	}
	p.mu.Lock()
	if res.Acquired {
		p.confirmed[req.Key] = sent
	} else {
		p.refusals++
	}
	p.mu.Unlock()
	if !res.Acquired && p.onRefused != nil {
		p.onRefused()
	}
	return res, nil
}

func (p *partition) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	sent := time.Now()
	ok, err := p.st.Renew(ctx, owner, ttl, items)
	p.record("renew", sent, len(items))
	if p.cut.Load() {
		return nil, errPartitioned
	}
	if err != nil {
		return ok, err
	}
	p.mu.Lock()
	for i, it := range items {
		if i < len(ok) && ok[i] {
			p.confirmed[it.Key] = sent
		}
	}
	p.mu.Unlock()
	return ok, nil
}

func (p *partition) Release(ctx context.Context, owner string, terms []store.Term) error {
	if p.cut.Load() {
		return errPartitioned
	}
	at := time.Now()
	p.mu.Lock()
	p.releases = append(p.releases, at)
	p.mu.Unlock()
	if p.onRelease != nil {
		p.onRelease(at)
	}
	err := p.st.Release(ctx, owner, terms)
	if p.cut.Load() {
		return errPartitioned
	}
	return err
}

func (p *partition) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	start := time.Now()
	ls, err := p.st.List(ctx, prefix)
	p.record("list", start, len(ls))
	if p.cut.Load() {
		return nil, errPartitioned
	}
	return ls, err
}

// Watch passes the store's push channel through while the partition is
// whole. A channel opened before the cut keeps delivering: a partitioned
// replica hearing of others' releases changes nothing, since it cannot
// acquire.
func (p *partition) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	w, ok := p.st.(store.Watcher)
	if !ok {
		return nil, errors.New("e2e: the store has no push channel")
	}
	if p.watchDelay > 0 {
		select {
		case <-time.After(p.watchDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ch, err := w.Watch(ctx, prefix)
	if err == nil {
		now := time.Now()
		p.watchedAt.CompareAndSwap(nil, &now)
		p.watching.Add(1)
	}
	return ch, err
}

// WatchedAt is when the first subscription was made (zero if none yet).
func (p *partition) WatchedAt() time.Time {
	if at := p.watchedAt.Load(); at != nil {
		return *at
	}
	return time.Time{}
}

// Watching reports whether a subscription to the store's push channel has
// been made.
func (p *partition) Watching() bool { return p.watching.Load() > 0 }
