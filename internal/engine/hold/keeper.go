// Package hold keeps one replica's side of the lease contract: which terms
// it holds, until when each may safely be used, and who holds the rest.
//
// The timing rule: a grant or renewal sent at local monotonic time t and
// confirmed by the store makes the store stamp an expiry no earlier than
// t + TTL, and a peer may take the key no earlier than that expiry + Grace.
// The local deadline is therefore t + TTL, and the keeper reports a key as
// held only while now + RenewEvery < deadline: the runner is stopped at
// least RenewEvery + Grace before any peer may start, whether or not the
// store answers. Only the rate of the local monotonic clock matters; clocks
// of different hosts are never compared.
//
// A store may date a grant earlier than its send, by the Elapsed it
// reports (etcd, whose session was found alive that long before, and is
// spared a keep-alive): the deadline is then t - Elapsed + TTL. The
// keeper allows at most maxElapsed, so that a new term is still held when
// its first renewal, sent within RenewEvery, answers within CallTimeout.
package hold

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/tenure-dev/tenure/internal/shrink"
	"github.com/tenure-dev/tenure/store"
)

// Timing is the lease timing a keeper applies. It is validated by the
// caller (tenure.Config).
type Timing struct {
	TTL         time.Duration
	Grace       time.Duration
	RenewEvery  time.Duration
	CallTimeout time.Duration
}

// maxElapsed is how far back a store may date a grant (see the package
// doc): TTL - 2·RenewEvery - CallTimeout, or nothing when that is not
// positive.
func (t Timing) maxElapsed() time.Duration {
	return max(t.TTL-2*t.RenewEvery-t.CallTimeout, 0)
}

// Outcome is the result of one renewal.
type Outcome int

const (
	// Renewed: the store confirmed the term; the deadline moved forward.
	Renewed Outcome = iota + 1
	// Lost: the store refused (another owner, a newer epoch, expired or
	// released): stop the runner now, and never release this term.
	Lost
	// Unconfirmed: the call failed or timed out. The term may or may not
	// still be ours; the deadline keeps running.
	Unconfirmed
)

func (o Outcome) String() string {
	switch o {
	case Renewed:
		return "renewed"
	case Lost:
		return "lost"
	case Unconfirmed:
		return "unconfirmed"
	}
	return "unknown"
}

// Term is a lease this replica holds, as the keeper sees it.
type Term struct {
	Key   string
	Epoch int64
	// Deadline is the local monotonic time by which a peer may be able to
	// take the key (send time of the last confirmed grant or renewal + TTL).
	Deadline time.Time
}

// Keeper is safe for concurrent use. Store calls are made without holding
// its lock, each bounded by Timing.CallTimeout.
type Keeper struct {
	st     store.Store
	owner  string
	timing Timing
	now    func() time.Time
	base   time.Time // observation.ends counts from here

	// applying lets one whole read at a time write its table into
	// observed (ObserveAll): each drops what it did not write. The engine
	// reads the whole table only from its loop's goroutine, so two never
	// overlap there; the lock keeps that true for any other caller.
	applying sync.Mutex

	mu       sync.Mutex
	held     map[string]Term
	observed shrink.Map[string, observation] // of the keys no numbering numbers
	numbered []*numbered                     // the pools' keys (numbered.go)
	keyBuf   []byte                          // where heldAt spells a numbered key
	// owners interns the owners in observed (observation.go); gen counts
	// the whole reads, so one updates observed in place and drops what it
	// did not list (copying the map only once most of it is gone): at
	// 10,000 keys a new map each round was most of what a round
	// allocated, and what made the collector stall rounds, and a spare
	// map kept for reuse doubled the view.
	owners map[string]unique.Handle[string]
	gen    uint32
	// acquiring tracks the acquisitions of a key in flight, so that a late
	// reply about a term that was superseded meanwhile is recognised even
	// when the newer term is no longer held here.
	acquiring map[string]*inFlight
	// reads counts the reads of the table in flight, and recent the
	// pushed events applied since the first of them began (view.go).
	reads  int
	recent []store.Event
	// unreleased are the terms whose release failed, retried until one
	// succeeds or the term is over (release.go).
	unreleased map[string]Term
}

// inFlight is the acquisitions of one key under way and floor, the
// highest epoch of the key known, since the first of them was sent, to
// have ended or been passed by a newer term: any term at or below it is
// stale.
type inFlight struct {
	n     int
	floor int64
}

// superseded notes that key's terms up to epoch are over, for the replies
// of acquisitions still in flight. k.mu is held.
func (k *Keeper) superseded(key string, epoch int64) {
	if a := k.acquiring[key]; a != nil && epoch > a.floor {
		a.floor = epoch
	}
}

// New returns a keeper for owner. now is the local monotonic clock; nil
// means time.Now (whose readings carry a monotonic component).
func New(st store.Store, owner string, timing Timing, now func() time.Time) *Keeper {
	if now == nil {
		now = time.Now
	}
	return &Keeper{
		st: st, owner: owner, timing: timing, now: now, base: now(),
		held:       make(map[string]Term),
		observed:   shrink.Make[string, observation](),
		owners:     make(map[string]unique.Handle[string]),
		acquiring:  make(map[string]*inFlight),
		unreleased: make(map[string]Term),
	}
}

// Timing returns the keeper's timing.
func (k *Keeper) Timing() Timing { return k.timing }

// Now reads the keeper's clock.
func (k *Keeper) Now() time.Time { return k.now() }

// Holds reports whether a runner for key may keep running until the next
// renewal: the key is held and now + RenewEvery is before its deadline.
func (k *Keeper) Holds(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.holdsLocked(key)
}

// HoldsTerm is Holds for one term: false once key is held under another
// epoch.
func (k *Keeper) HoldsTerm(key string, epoch int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.holdsLocked(key) && k.held[key].Epoch == epoch
}

// HoldsAt is Holds with the clock read by the caller: a loop over many
// keys reads it once per key without paying for the reading here.
func (k *Keeper) HoldsAt(key string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.held[key]
	return ok && now.Add(k.timing.RenewEvery).Before(t.Deadline)
}

func (k *Keeper) holdsLocked(key string) bool {
	t, ok := k.held[key]
	return ok && k.now().Add(k.timing.RenewEvery).Before(t.Deadline)
}

// Term returns the term of key that this replica believes it holds, even
// when it is too near its deadline to be used.
func (k *Keeper) Term(key string) (Term, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.held[key]
	return t, ok
}

// StopAt is the local time at which Holds(key) turns false unless a
// renewal is confirmed first.
func (t Term) StopAt(timing Timing) time.Time { return t.Deadline.Add(-timing.RenewEvery) }

// Held returns every term this replica believes it holds, sorted by key.
func (k *Keeper) Held() []Term {
	terms := k.snapshot()
	slices.SortFunc(terms, func(a, b Term) int { return strings.Compare(a.Key, b.Key) })
	return terms
}

// HeldCount is how many terms this replica believes it holds.
func (k *Keeper) HeldCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// snapshot copies the held terms in no order: the renewal round needs no
// sorting, and at 10,000 keys it would be most of the engine's own work.
func (k *Keeper) snapshot() []Term {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.AppendSeq(make([]Term, 0, len(k.held)), maps.Values(k.held))
}

// Acquired is the result of an acquisition attempt.
type Acquired struct {
	// OK: this replica holds key (newly or already).
	OK bool
	// New: a new term was started by this call.
	New   bool
	Epoch int64
	// Holder is the blocking peer lease when not OK.
	Holder store.Lease
	// RetryAt is the local time at which the blocking lease may first be
	// taken (its expiry + grace), when not OK.
	RetryAt time.Time
	// Ended: a term this replica held until this answer has ended (it
	// could not be renewed and another holds the key). Reported once:
	// a refused renewal that ended it first leaves nothing to end here.
	Ended bool
}

// Acquire holds key, starting a new term if needed. A key this replica
// already holds safely is returned without a store call. A record near its
// deadline is re-acquired, which starts a new term.
func (k *Keeper) Acquire(ctx context.Context, key string, running bool) (Acquired, error) {
	k.mu.Lock()
	if k.holdsLocked(key) {
		t := k.held[key]
		k.mu.Unlock()
		return Acquired{OK: true, Epoch: t.Epoch}, nil
	}
	a := k.acquiring[key]
	if a == nil {
		a = &inFlight{}
		k.acquiring[key] = a
	}
	a.n++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		if a.n--; a.n == 0 {
			delete(k.acquiring, key)
		}
		k.mu.Unlock()
	}()

	sent := k.now()
	res, err := bounded(ctx, k.timing.CallTimeout, func(ctx context.Context) (store.AcquireResult, error) {
		return k.st.Acquire(ctx, store.AcquireRequest{
			Key: key, Owner: k.owner, TTL: k.timing.TTL, Grace: k.timing.Grace, Running: running,
			MaxElapsed: k.timing.maxElapsed(),
		})
	})
	if err != nil {
		return Acquired{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	// Replies may arrive out of order (two attempts in flight): a reply
	// about an older term than the one installed meanwhile is stale and
	// must neither replace nor drop it; nor may it be installed once that
	// newer term has ended too (released, lost, or passed by a peer's).
	replyEpoch := res.Epoch
	if !res.Acquired {
		replyEpoch = res.Holder.Epoch
	}
	if cur, ok := k.held[key]; ok && replyEpoch < cur.Epoch {
		return Acquired{OK: k.holdsLocked(key), Epoch: cur.Epoch}, nil
	}
	if replyEpoch <= a.floor && (res.Acquired || replyEpoch < a.floor) {
		// Stale, and nothing newer is held: say nothing about the key and
		// let the caller ask again.
		return Acquired{RetryAt: k.now()}, nil
	}
	if !res.Acquired {
		k.superseded(key, res.Holder.Epoch)
		// A peer holds the row, so any local record of ours is stale.
		_, ended := k.held[key]
		delete(k.held, key)
		k.record(key, k.observe(res.Holder, sent))
		// The key frees at expiry + grace; TimeLeft is negative once the
		// term has expired, so this is exact within grace too. The store
		// read its clock after we sent, so this errs early, never late.
		return Acquired{Holder: res.Holder, RetryAt: sent.Add(max(res.Holder.TimeLeft+k.timing.Grace, 0)), Ended: ended}, nil
	}
	if cur, ok := k.held[key]; ok {
		k.superseded(key, cur.Epoch)
	}
	k.held[key] = Term{Key: key, Epoch: res.Epoch, Deadline: sent.Add(k.timing.TTL - max(res.Elapsed, 0))}
	k.forget(key)
	delete(k.unreleased, key) // a newer term: the old one is over
	return Acquired{OK: true, New: true, Epoch: res.Epoch}, nil
}

// RenewAll renews every held term in one store call. running reports,
// for all the terms at once (one lock of the caller's, not one per key),
// whether each key's runner is running, recorded for peers to see; nil
// means none is. The result has an outcome per key renewed; the error, if
// any, is why they are unconfirmed.
func (k *Keeper) RenewAll(ctx context.Context, running func(terms []Term) []bool) (map[string]Outcome, error) {
	terms := k.snapshot()
	if len(terms) == 0 {
		return nil, nil
	}
	var flags []bool
	if running != nil {
		flags = running(terms)
	}
	items := make([]store.RenewItem, len(terms))
	for i, t := range terms {
		items[i] = store.RenewItem{Key: t.Key, Epoch: t.Epoch, Running: flags != nil && flags[i]}
	}
	sent := k.now()
	results, err := bounded(ctx, k.timing.CallTimeout, func(ctx context.Context) ([]bool, error) {
		return k.st.Renew(ctx, k.owner, k.timing.TTL, items)
	})
	out := make(map[string]Outcome, len(terms))
	if err == nil && len(results) != len(items) {
		err = errors.New("hold: store returned a renewal result of the wrong length")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, t := range terms {
		cur, ok := k.held[t.Key]
		if !ok || cur.Epoch != t.Epoch {
			continue // released or re-acquired while the call was out
		}
		switch {
		case err != nil:
			out[t.Key] = Unconfirmed
		case results[i]:
			// Never move the deadline past send time + TTL, and never back.
			if d := sent.Add(k.timing.TTL); d.After(cur.Deadline) {
				cur.Deadline = d
				k.held[t.Key] = cur
			}
			out[t.Key] = Renewed
		default:
			delete(k.held, t.Key)
			k.forget(t.Key) // it showed us: stale now
			k.superseded(t.Key, t.Epoch)
			out[t.Key] = Lost
		}
	}
	return out, err
}

// Release ends the given terms (best effort: they expire anyway). Terms are
// dropped locally before the call so nothing renews them meanwhile.
func (k *Keeper) Release(ctx context.Context, terms ...Term) error {
	var sent []Term
	var toRelease []store.Term
	k.mu.Lock()
	for _, t := range terms {
		if cur, ok := k.held[t.Key]; ok && cur.Epoch == t.Epoch {
			delete(k.held, t.Key)
			k.forget(t.Key) // it showed us: stale now
			k.superseded(t.Key, t.Epoch)
			sent = append(sent, cur)
			toRelease = append(toRelease, store.Term{Key: t.Key, Epoch: t.Epoch})
		}
	}
	k.mu.Unlock()
	if len(toRelease) == 0 {
		return nil
	}
	_, err := bounded(ctx, k.timing.CallTimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, k.st.Release(ctx, k.owner, toRelease)
	})
	if err != nil {
		k.recordUnreleased(sent)
	}
	return err
}

// applyChunk is how many leases a whole read writes into the view under
// one hold of the keeper's lock: about a quarter of a millisecond. Between
// chunks the read lets go of the lock and takes it straight back, so a
// renewal waiting for it gets in only once sync.Mutex turns fair, after
// it has waited 1 ms: a review measured waits of up to 1.6 ms during a
// whole read of 100,000 leases (9 ms for the first read into an empty
// view under GC), against tens of milliseconds in one hold.
const applyChunk = 1024

// ObserveAll refreshes the cached view of every key's lease with one list
// call. Keys this replica holds are not cached as observations.
func (k *Keeper) ObserveAll(ctx context.Context, prefix string) error {
	from := k.beginRead()
	at := k.now()
	leases, err := bounded(ctx, k.timing.CallTimeout, func(ctx context.Context) ([]store.Lease, error) {
		return k.st.List(ctx, prefix)
	})
	if err != nil {
		k.mu.Lock()
		k.endReadLocked(from)
		k.mu.Unlock()
		return err
	}
	// The read replaces the view: what it lists is written over the
	// view's record (Go replaces the map's key with the read's string, so
	// a store whose List returned substrings of one buffer would keep that
	// buffer alive, as before); what it does not list and nothing else
	// wrote since the read began writing is dropped. It writes in
	// chunks and lets go of the lock between them, so that a renewal does
	// not wait for 100,000 writes (tens of milliseconds): meanwhile the
	// view mixes this read's leases with older ones, each a lease as read,
	// as the events that arrive during a read make it anyway.
	k.applying.Lock()
	defer k.applying.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gen++
	k.owners = make(map[string]unique.Handle[string], len(k.owners))
	for i, l := range leases {
		if i > 0 && i%applyChunk == 0 {
			k.mu.Unlock()
			k.mu.Lock()
		}
		k.record(l.Key, k.observe(l, at))
	}
	for key, o := range k.observed.M {
		if o.gen != k.gen {
			k.observed.Delete(key)
		}
	}
	k.observed.Compact()
	for _, n := range k.numbered {
		for i := range n.obs {
			if n.obs[i].has && n.obs[i].gen != k.gen {
				n.obs[i] = observation{}
			}
		}
	}
	k.endReadLocked(from)
	return nil
}

// Observed returns the last observed lease of key held by someone else,
// with its time left aged by the local time since it was read.
func (k *Keeper) Observed(key string) (store.Lease, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.observedLocked(key)
}

func (k *Keeper) observedLocked(key string) (store.Lease, bool) {
	return k.observedAtLocked(key, k.now())
}

// observedAtLocked is observedLocked with the clock read by the caller: a
// loop over every observed key reads it once, not once per key (a reading
// of the keeper's clock is a system call or two, and at 100,000 keys the
// loops held the keeper's lock, which renewals wait for, for seconds).
func (k *Keeper) observedAtLocked(key string, now time.Time) (store.Lease, bool) {
	if k.holds(key) {
		return store.Lease{}, false
	}
	o, ok := k.lookup(key)
	if !ok {
		return store.Lease{}, false
	}
	return k.leaseAt(key, o, now), true
}

// LeaderOf returns the owner of key's live lease as last seen, or "".
func (k *Keeper) LeaderOf(key string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, mine := k.held[key]; mine {
		return k.owner
	}
	if l, ok := k.observedLocked(key); ok && l.Live && l.Owner != "" {
		return l.Owner
	}
	return ""
}

// PeerLeads reports whether a live lease of another owner was last seen
// for key.
func (k *Keeper) PeerLeads(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.observedLocked(key)
	return ok && l.Live && l.Owner != "" && l.Owner != k.owner
}

// ErrCallTimeout: a store call did not answer within Timing.CallTimeout.
var ErrCallTimeout = errors.New("hold: store call timed out")

// bounded runs call with a context that ends after timeout, and returns
// when it ends even if the store ignores the context, so a stalled store
// cannot hold a renewal past the deadline it protects. A call that answers
// after its timeout is reported as an error: its effect is unconfirmed.
func bounded[T any](ctx context.Context, timeout time.Duration, call func(context.Context) (T, error)) (T, error) {
	if timeout <= 0 {
		return call(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, ErrCallTimeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err == nil && ctx.Err() != nil {
			// It answered, but too late to count: the deadline it would
			// extend was computed from a send time that is now stale.
			var zero T
			return zero, context.Cause(ctx)
		}
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}
