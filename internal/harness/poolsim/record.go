package poolsim

import (
	"context"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// keyLog is the record of one key's runs. Guarded by Sim.mu.
type keyLog struct {
	open     []*run // runs going on now: more than one is an overlap
	last     *run   // the run that ended last
	holder   string // the worker of the run that started last
	ever     bool   // ran at least once
	lastMove time.Time
	moved    bool
}

// run is one runner's span on one worker.
type run struct {
	worker     string
	begin, end time.Time
}

type episode struct {
	key      string
	from, to time.Time
}

func (kl *keyLog) runningOn(worker string) bool {
	for _, r := range kl.open {
		if r.worker == worker {
			return true
		}
	}
	return false
}

// runner is worker's pool runner: it records its span and waits for the
// engine to stop it.
func (s *Sim) runner(worker string) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
		r := s.began(worker, l.Key)
		<-ctx.Done()
		s.ended(l.Key, r)
		return nil
	})
}

// began records that k started running on worker now.
func (s *Sim) began(worker, k string) *run {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	kl := s.keys[k]
	switch {
	case len(kl.open) > 0:
		s.totals.Overlaps++ // the engine started a key that runs elsewhere
	case !kl.ever:
		s.episodes = append(s.episodes, episode{key: k, from: s.start, to: now})
	default:
		s.episodes = append(s.episodes, episode{key: k, from: kl.last.end, to: now})
	}
	if kl.ever && kl.holder != worker {
		s.totals.Moves++
		if kl.moved && now.Sub(kl.lastMove) < s.cfg.MinHold {
			s.totals.Bounces++
		}
		kl.lastMove, kl.moved = now, true
	}
	if crashed, ok := s.crashWatch[k]; ok {
		s.recoveries = append(s.recoveries, episode{key: k, from: crashed, to: now})
		delete(s.crashWatch, k)
	}
	r := &run{worker: worker, begin: now}
	kl.open = append(kl.open, r)
	kl.holder, kl.ever = worker, true
	return r
}

// ended records that r, a run of k, stopped now.
func (s *Sim) ended(k string, r *run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kl := s.keys[k]
	r.end = time.Now()
	for i, o := range kl.open {
		if o == r {
			kl.open = append(kl.open[:i], kl.open[i+1:]...)
			break
		}
	}
	kl.last = r
}

// poolKey is the source's key of a lease key of the simulated pool.
func (s *Sim) poolKey(leaseKey string) (string, bool) {
	_, pool, k, ok := poolkey.ParseKey(leaseKey)
	return k, ok && pool == PoolName && s.keySet[k]
}

// sample records the keys each active worker runs, and checks every run
// against the store: a key running on a worker while the store's live
// lease names another is an overlap.
func (s *Sim) sample(ctx context.Context) {
	s.nextSample = s.nextSample.Add(s.cfg.ClaimInterval)
	s.samples = append(s.samples, s.counts())
	leases, err := s.st.List(ctx, "")
	if err != nil {
		panic(err) // memstore fails only when a test stages it
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range leases {
		k, ok := s.poolKey(l.Key)
		if !ok || !l.Live {
			continue
		}
		for _, r := range s.keys[k].open {
			if r.worker != tenure.OwnerName(l.Owner) {
				s.totals.Overlaps++
			}
		}
	}
}

// counts is the keys each active worker runs now.
func (s *Sim) counts() Sample {
	counts := make(map[string]int)
	for _, id := range s.Active() {
		counts[id] = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, kl := range s.keys {
		for _, r := range kl.open {
			if _, ok := counts[r.worker]; ok {
				counts[r.worker]++
			}
		}
	}
	return Sample{At: time.Now(), Counts: counts}
}

// tap passes a worker's calls to the store and counts what the store
// answers about the pool's keys (outcomes the engine judges, such as a
// lost renewal, come from its Observer instead). Once the worker has crashed
// (Partition.Cut) every call fails.
type tap struct {
	*testenv.Partition
	sim *Sim
	w   *worker
}

func (t *tap) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	res, err := t.Partition.Acquire(ctx, req)
	if _, ok := t.sim.poolKey(req.Key); ok && err == nil {
		t.sim.mu.Lock()
		if res.Acquired {
			t.sim.totals.Acquires++
		} else {
			t.sim.totals.Refusals++
		}
		t.sim.mu.Unlock()
	}
	return res, err
}

// List counts the worker's reads of the lease table and the leases they
// return: what the pool costs the store, worker by worker.
func (t *tap) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	leases, err := t.Partition.List(ctx, prefix)
	if err == nil {
		t.sim.mu.Lock()
		t.sim.totals.Lists++
		t.sim.totals.RowsRead += len(leases)
		t.sim.mu.Unlock()
	}
	return leases, err
}

// Release counts the keys a policy gives back, and those of them that ran
// here for less than MinHold; a leaving worker's releases are not a
// policy's.
func (t *tap) Release(ctx context.Context, owner string, terms []store.Term) error {
	err := t.Partition.Release(ctx, owner, terms)
	s := t.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || t.w.leaving {
		return err
	}
	for _, term := range terms {
		k, ok := s.poolKey(term.Key)
		if !ok {
			continue
		}
		s.totals.Released++
		if last := s.keys[k].last; last != nil && last.worker == t.w.id && last.end.Sub(last.begin) < s.cfg.MinHold {
			s.totals.FreshSheds++
		}
	}
	return nil
}

// observer counts what the engine reports of its leases.
type observer struct {
	tenure.NopObserver
	sim *Sim
}

func (o observer) Handover(cause string) {
	if cause != tenure.HandoverLost {
		return
	}
	o.sim.mu.Lock()
	o.sim.totals.Lost++
	o.sim.mu.Unlock()
}

func (o observer) DeadlineStop() {
	o.sim.mu.Lock()
	o.sim.totals.DeadlineStops++
	o.sim.mu.Unlock()
}

// pushTap is a tap on a store with a push channel.
type pushTap struct {
	*tap
	watcher store.Watcher
}

func (p pushTap) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	if p.Cut.Load() {
		return nil, testenv.ErrPartitioned
	}
	return p.watcher.Watch(ctx, prefix)
}
