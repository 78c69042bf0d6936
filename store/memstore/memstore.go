// Package memstore is an in-memory lease store for tests and simulations.
//
// It follows every rule of the store contract on an injectable clock, pushes
// in-process events to watchers, lets an operator revoke terms, and has two
// test hooks that real stores lack: [Store.SetFault] makes calls fail (an
// unreachable or slow store) and [Store.Put] overwrites a record (a peer that
// took the key behind the engine's back). It keeps one map entry per key, so
// simulations with 100,000 keys stay fast.
//
// A Store lives in one process: it is not a way to coordinate processes.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
)

var (
	_ store.Store   = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
	_ store.Revoker = (*Store)(nil)
)

// Operation names passed to a fault function (see [Store.SetFault]).
const (
	OpAcquire = "acquire"
	OpRenew   = "renew"
	OpRelease = "release"
	OpList    = "list"
	OpWatch   = "watch"
	OpRevoke  = "revoke"
	OpPrune   = "prune"
)

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// Clock is the store's clock; nil means time.Now, which inside a
	// testing/synctest bubble is the bubble's fake clock.
	Clock func() time.Time

	// WatchBuffer is the capacity of each watcher's channel; zero means
	// 1024. Events that do not fit are dropped, and a Missed event tells
	// the watcher so (store.Offer): a slow watcher never blocks the store.
	WatchBuffer int
}

// Store is an in-memory lease store, safe for concurrent use. Create it
// with [New].
type Store struct {
	clock    func() time.Time
	watchBuf int
	fault    atomic.Pointer[func(op string) error]

	mu       sync.Mutex
	records  map[string]*record
	floor    int64     // the highest epoch Prune deleted; new records start above it
	sorted   []*record // records in key order; valid when !unsorted
	unsorted bool
	watchers map[*watcher]struct{}
}

// record is one key's lease. Only Prune deletes one, and it keeps the
// epoch in the store's floor, so epochs only grow.
type record struct {
	key      string
	owner    string // "" after a revocation
	epoch    int64
	expiry   time.Time
	released bool // ended by Release: free at once
	revoked  bool // ended by Revoke: free once expiry + grace has passed
	running  bool
}

type watcher struct {
	prefix string
	ch     chan store.Event
}

// New returns an empty store.
func New(opts Options) *Store {
	s := &Store{
		clock:    opts.Clock,
		watchBuf: opts.WatchBuffer,
		records:  make(map[string]*record),
		watchers: make(map[*watcher]struct{}),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.watchBuf <= 0 {
		s.watchBuf = 1024
	}
	return s
}

// SetFault makes every later call consult f with the call's operation name
// (OpAcquire, OpRenew, …) before doing anything: when f returns an error,
// the call fails with it wrapped and the store is left unchanged. f runs
// outside the store's lock, so it may block to simulate a slow store (the
// call then fails with ctx's error if ctx ended meanwhile); it must be safe
// for concurrent use. SetFault(nil) heals the store.
//
//	s.SetFault(func(op string) error {
//		if op == memstore.OpRenew {
//			return errors.New("connection refused")
//		}
//		return nil
//	})
func (s *Store) SetFault(f func(op string) error) {
	if f == nil {
		s.fault.Store(nil)
		return
	}
	s.fault.Store(&f)
}

// Put overwrites key's record as if the store had written it, bypassing
// every rule (epochs included), so a test can stage what a peer or an
// operator did: a newer epoch taken by another owner, a released term, a
// term about to expire. l.Key, Owner, Epoch, Released and Running are
// stored; the expiry becomes store-now + l.TimeLeft; l.Live is derived, so
// it is ignored. Watchers get a Released event when l.Released, otherwise an
// Acquired one. Put panics when l.Key is not a valid key.
func (s *Store) Put(l store.Lease) {
	if err := store.ValidateKey(l.Key); err != nil {
		panic("memstore: Put: " + err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.record(l.Key)
	*r = record{
		key:      l.Key,
		owner:    l.Owner,
		epoch:    l.Epoch,
		expiry:   s.clock().Add(l.TimeLeft),
		released: l.Released,
		running:  l.Running,
	}
	kind := store.Acquired
	if l.Released {
		kind = store.Released
	}
	s.notify(store.Event{Kind: kind, Key: l.Key, Owner: l.Owner, Epoch: l.Epoch})
}

// begin runs the fault hook and checks ctx; a call proceeds only when both
// let it.
func (s *Store) begin(ctx context.Context, op string) error {
	if f := s.fault.Load(); f != nil {
		if err := (*f)(op); err != nil {
			return fmt.Errorf("memstore: %s: %w", op, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s: %w", op, err)
	}
	return nil
}

// record returns key's record, creating an empty one. s.mu is held.
func (s *Store) record(key string) *record {
	r := s.records[key]
	if r == nil {
		r = &record{key: key, epoch: s.floor}
		s.records[key] = r
		s.unsorted = true
	}
	return r
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, fmt.Errorf("memstore: acquire: %w", err)
	}
	if err := s.begin(ctx, OpAcquire); err != nil {
		return store.AcquireResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	if r := s.records[req.Key]; r != nil && !r.freeFor(req.Owner, req.Grace, now) {
		return store.AcquireResult{Holder: r.lease(now)}, nil
	}
	r := s.record(req.Key)
	*r = record{
		key:     req.Key,
		owner:   req.Owner,
		epoch:   r.epoch + 1,
		expiry:  now.Add(req.TTL),
		running: req.Running,
	}
	s.notify(store.Event{Kind: store.Acquired, Key: req.Key, Owner: r.owner, Epoch: r.epoch})
	return store.AcquireResult{Acquired: true, Epoch: r.epoch}, nil
}

// freeFor reports whether owner may start a new term now. The owner of the
// current term may always start a new one: it is the only process the
// grace period protects, and the new epoch fences its old term.
func (r *record) freeFor(owner string, grace time.Duration, now time.Time) bool {
	return r.released || r.owner == owner || !now.Before(r.expiry.Add(grace))
}

func (r *record) live(now time.Time) bool {
	return !r.released && !r.revoked && now.Before(r.expiry)
}

func (r *record) lease(now time.Time) store.Lease {
	return store.Lease{
		Key:      r.key,
		Owner:    r.owner,
		Epoch:    r.epoch,
		Live:     r.live(now),
		Released: r.released,
		Running:  r.running,
		TimeLeft: r.expiry.Sub(now),
	}
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if err := store.ValidateRenew(owner, ttl, items); err != nil {
		return nil, fmt.Errorf("memstore: renew: %w", err)
	}
	if err := s.begin(ctx, OpRenew); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	renewed := make([]bool, len(items))
	for i, it := range items {
		r := s.records[it.Key]
		if r == nil || r.owner != owner || r.epoch != it.Epoch || !r.live(now) {
			continue
		}
		r.expiry = now.Add(ttl)
		r.running = it.Running
		renewed[i] = true
	}
	return renewed, nil
}

// Release implements store.Store. An expired term that is still owner's
// current one is released too, so a peer need not wait for its grace.
func (s *Store) Release(ctx context.Context, owner string, terms []store.Term) error {
	if err := store.ValidateRelease(owner, terms); err != nil {
		return fmt.Errorf("memstore: release: %w", err)
	}
	if err := s.begin(ctx, OpRelease); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for _, t := range terms {
		r := s.records[t.Key]
		if r == nil || r.owner != owner || r.epoch != t.Epoch || r.released {
			continue
		}
		r.released = true
		r.running = false
		if r.expiry.After(now) {
			r.expiry = now
		}
		s.notify(store.Event{Kind: store.Released, Key: t.Key, Owner: owner, Epoch: t.Epoch})
	}
	return nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if err := s.begin(ctx, OpList); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unsorted {
		// Keys are added rarely (once each), so sorting lazily here keeps
		// a simulation that creates 100,000 keys from re-sorting per key.
		s.sorted = s.sorted[:0]
		for _, r := range s.records {
			s.sorted = append(s.sorted, r)
		}
		slices.SortFunc(s.sorted, func(a, b *record) int { return strings.Compare(a.key, b.key) })
		s.unsorted = false
	}
	now := s.clock()
	// Keys with the prefix form one run in key order.
	first := sort.Search(len(s.sorted), func(i int) bool { return s.sorted[i].key >= prefix })
	n := sort.Search(len(s.sorted)-first, func(i int) bool { return !strings.HasPrefix(s.sorted[first+i].key, prefix) })
	leases := make([]store.Lease, n)
	for i, r := range s.sorted[first : first+n] {
		leases[i] = r.lease(now)
	}
	return leases, nil
}

// Revoke implements store.Revoker: a live term moves to a new epoch owned by
// nobody and keeps its expiry, so its holder's renewals are refused and
// peers may acquire once expiry + grace has passed. A key without a live
// term is left alone and reported as not revoked.
func (s *Store) Revoke(ctx context.Context, key string) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, fmt.Errorf("memstore: revoke: %w", err)
	}
	if err := s.begin(ctx, OpRevoke); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	r := s.records[key]
	if r == nil || !r.live(now) {
		return false, nil
	}
	// The expiry is kept: a holder that never hears of the revocation may
	// run until it, so peers wait for it + grace as for any live term.
	*r = record{key: key, epoch: r.epoch + 1, expiry: r.expiry, revoked: true}
	return true, nil
}

// Watch implements store.Watcher. Events for changes made after Watch
// returns are delivered in order, unless the channel's buffer is full.
func (s *Store) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if err := s.begin(ctx, OpWatch); err != nil {
		return nil, err
	}
	w := &watcher{prefix: prefix, ch: make(chan store.Event, s.watchBuf)}
	s.mu.Lock()
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	// AfterFunc needs no goroutine while ctx is alive; closing under s.mu
	// guarantees notify never sends on a closed channel.
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.watchers, w)
		close(w.ch)
	})
	return w.ch, nil
}

// notify offers ev to every watcher of its key without blocking. s.mu is
// held.
func (s *Store) notify(ev store.Event) {
	for w := range s.watchers {
		if !strings.HasPrefix(ev.Key, w.prefix) {
			continue
		}
		store.Offer(w.ch, ev) // full: the watcher hears it missed events
	}
}
