package tenure

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/balance"
	"github.com/tenure-dev/tenure/store"
)

// WorkerPrefix is the reserved key prefix under which pool workers hold
// their membership leases: WorkerPrefix + pool + "/" + owner + "@" + weight.
const WorkerPrefix = "~workers/"

// Pool is a set of keys shared fairly across every replica that runs the
// same pool: each key is run by at most one replica, and keys are
// rebalanced as replicas come and go.
//
// Each key has a preferred replica by weighted rendezvous hashing over the
// live replicas. A replica claims the keys it prefers up to a cap slightly
// above its fair share, claims orphaned keys after a short delay, sheds the
// keys it is least preferred for above the cap, and hands keys over to a
// preferred replica that is under its share — a few per round and only
// after a minimum hold, so a join moves close to the minimum number of keys
// and no key bounces.
type Pool struct {
	// Name identifies the pool; every replica of the pool uses the same
	// name. It must be a plain identifier (letters, digits, underscore).
	Name string
	// Source supplies the keys. Required.
	Source KeySource
	// Runner runs each claimed key; lease.Key is the pool key. Required.
	Runner Runner
	// RefreshEvery is how often Source is read. Default 30s. Call
	// Supervisor.RefreshPool to read it at once.
	RefreshEvery time.Duration
	// Weight scales this replica's share (default 1).
	Weight float64
	// Epsilon, MaxKeys, OrphanDelay, MinHold and HandoffRate tune the
	// balance; zero values take the defaults: 0.1, no maximum,
	// 1.5×RenewEvery (longer than a round, so a handed-over key reaches
	// its preferred worker first even without push events), 30s and 0.1.
	Epsilon     float64
	MaxKeys     int
	OrphanDelay time.Duration
	MinHold     time.Duration
	HandoffRate float64
}

// poolState is a pool's run-time state. Guarded by Supervisor.mu except
// policy, which only the supervision loop uses.
type poolState struct {
	cfg       Pool
	memberKey string
	policy    *balance.Balanced
	keys      []string // latest from Source; nil until first loaded
	keySet    map[string]bool
	lastErr   error
	refresh   chan struct{}
	plan      balance.Plan
}

// AddPool adds a pool to the supervisor. Leases must be on.
func (s *Supervisor) AddPool(p Pool) error {
	if err := store.ValidateName("pool name", p.Name); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	switch {
	case !s.leased:
		return fmt.Errorf("pool %s: pools need leases (a store and Leases on): %w", p.Name, ErrConfig)
	case p.Source == nil:
		return fmt.Errorf("pool %s: Source is required: %w", p.Name, ErrConfig)
	case p.Runner == nil:
		return fmt.Errorf("pool %s: Runner is required: %w", p.Name, ErrConfig)
	case p.Weight < 0 || p.Epsilon < 0 || p.MaxKeys < 0 || p.HandoffRate < 0 || p.HandoffRate > 1:
		return fmt.Errorf("pool %s: Weight, Epsilon, MaxKeys and HandoffRate (≤ 1) must not be negative: %w", p.Name, ErrConfig)
	}
	if p.Weight == 0 {
		p.Weight = 1
	}
	if p.RefreshEvery <= 0 {
		p.RefreshEvery = 30 * time.Second
	}
	if p.OrphanDelay <= 0 {
		p.OrphanDelay = s.cfg.RenewEvery * 3 / 2
	}
	member := WorkerPrefix + p.Name + "/" + s.owner + "@" + strconv.FormatFloat(p.Weight, 'g', -1, 64)
	if err := store.ValidateKey(member); err != nil {
		return fmt.Errorf("pool %s: owner id too long for a membership key: %w", p.Name, err)
	}
	ps := &poolState{
		cfg:       p,
		memberKey: member,
		refresh:   make(chan struct{}, 1),
		policy: balance.NewBalanced(balance.Config{
			Epsilon: p.Epsilon, MaxKeys: p.MaxKeys, OrphanDelay: p.OrphanDelay,
			MinHold: p.MinHold, HandoffRate: p.HandoffRate,
		}),
	}
	s.mu.Lock()
	defer s.unlock()
	if s.pools == nil {
		s.pools = make(map[string]*poolState)
	}
	if _, dup := s.pools[p.Name]; dup {
		return fmt.Errorf("pool %s: already added: %w", p.Name, ErrConfig)
	}
	s.pools[p.Name] = ps
	// Membership is a lease like any other, renewed in the same batch; its
	// runner only marks the worker as running (not draining).
	s.keys[member] = &keyState{key: member, configured: true, job: Job{Runner: RunnerFunc(func(ctx context.Context, _ Lease) error {
		<-ctx.Done()
		return nil
	})}}
	return nil
}

// RefreshPool makes the pool read its key source now.
func (s *Supervisor) RefreshPool(name string) error {
	s.mu.Lock()
	ps := s.pools[name]
	s.unlock()
	if ps == nil {
		return fmt.Errorf("pool %q: %w", name, ErrUnknownKey)
	}
	select {
	case ps.refresh <- struct{}{}:
	default:
	}
	return nil
}

// refreshPools reads every pool's key source periodically and on demand,
// outside the supervision loop so a slow source never delays a renewal.
func (s *Supervisor) refreshPool(ctx context.Context, ps *poolState) {
	for {
		rctx, cancel := context.WithTimeout(ctx, ps.cfg.RefreshEvery)
		keys, err := ps.cfg.Source.Keys(rctx)
		cancel()
		if err == nil {
			err = validateKeys(keys)
		}
		s.mu.Lock()
		if err != nil {
			ps.lastErr = err
			s.logLocked(slog.LevelWarn, "could not read the pool's keys; keeping the previous set", "pool", ps.cfg.Name, "err", err)
		} else {
			ps.lastErr = nil
			ps.keys = keys
			ps.keySet = make(map[string]bool, len(keys))
			for _, k := range keys {
				ps.keySet[k] = true
			}
			s.replan = true
		}
		s.unlock()
		s.poke()
		t := time.NewTimer(ps.cfg.RefreshEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-ps.refresh:
			t.Stop()
		}
	}
}

func validateKeys(keys []string) error {
	for _, k := range keys {
		if err := store.ValidateKey(k); err != nil {
			return err
		}
		if strings.HasPrefix(k, WorkerPrefix) {
			return fmt.Errorf("key %q: the prefix %q is reserved for pool membership: %w", k, WorkerPrefix, store.ErrInvalidKey)
		}
	}
	return nil
}

// planPools runs every pool's policy on the last observed lease table and
// marks the keys to claim and to give back.
func (s *Supervisor) planPools() {
	s.mu.Lock()
	pools := make([]*poolState, 0, len(s.pools))
	for _, ps := range s.pools {
		pools = append(pools, ps)
	}
	s.replan, s.replanAt = false, time.Time{}
	s.unlock()
	for _, ps := range pools {
		s.planPool(ps)
	}
}

func (s *Supervisor) planPool(ps *poolState) {
	now := time.Now()
	s.mu.Lock()
	keys, keySet := ps.keys, ps.keySet
	// Claim only once membership has been held for a round, so peers
	// starting together see each other first: otherwise the first one up
	// claims every key and sheds most of them a moment later.
	member := s.keeper.Holds(ps.memberKey)
	settled := false
	if mk := s.keys[ps.memberKey]; mk != nil && member {
		settled = now.Sub(mk.heldSince) >= s.cfg.RenewEvery
	}
	s.unlock()
	if keys == nil {
		return
	}
	view := balance.View{Self: s.owner, Now: now, Keys: keys, Owner: make(map[string]string), HeldSince: make(map[string]time.Time)}
	prefix := WorkerPrefix + ps.cfg.Name + "/"
	// Keys whose holder crashed are still blocked during grace: counting
	// them as owned keeps the first worker around from taking keys it does
	// not prefer before their preferred worker can.
	s.keeper.LiveOwners(true, func(key, owner string, live, running bool) {
		if rest, ok := strings.CutPrefix(key, prefix); ok {
			if !live {
				return // a member in grace is gone
			}
			if w, ok := parseMember(rest, owner); ok {
				w.Draining = !running
				if owner == s.owner {
					w.Draining = !member
				}
				view.Workers = append(view.Workers, w)
			}
			return
		}
		if keySet[key] {
			view.Owner[key] = owner
		}
	})

	s.mu.Lock()
	defer s.unlock()
	for key := range view.Owner {
		if ks := s.keys[key]; ks != nil && view.Owner[key] == s.owner {
			view.HeldSince[key] = ks.heldSince
		}
	}
	var plan balance.Plan
	if settled {
		plan = ps.policy.Plan(view)
	}
	ps.plan = plan
	if !plan.Recheck.IsZero() && (s.replanAt.IsZero() || plan.Recheck.Before(s.replanAt)) {
		s.replanAt = plan.Recheck
	}
	for _, key := range plan.Claim {
		ks := s.keys[key]
		if ks == nil {
			ks = &keyState{key: key}
			s.keys[key] = ks
		}
		if ks.pool == nil && ks.configured {
			continue // a singleton key of the same name wins
		}
		ks.pool, ks.configured, ks.claim = ps, true, true
		ks.job = Job{Runner: ps.cfg.Runner}
		ks.nextAcquire = time.Time{}
	}
	for _, key := range plan.Release {
		if ks := s.keys[key]; ks != nil && ks.pool == ps {
			ks.claim = false
			s.metrics.poolMove()
		}
	}
	for key, ks := range s.keys {
		if ks.pool != ps {
			continue
		}
		if !keySet[key] {
			ks.configured = false // left the source: stop, release, forget
		}
		if !ks.claim && ks.run == nil && !ks.starting && !ks.releasing {
			if _, held := s.keeper.Term(key); !held {
				delete(s.keys, key)
			}
		}
	}
	s.poke()
}

// parseMember reads a membership key's tail "owner@weight".
func parseMember(rest, owner string) (balance.Worker, bool) {
	i := strings.LastIndexByte(rest, '@')
	if i < 0 || rest[:i] != owner {
		return balance.Worker{}, false
	}
	w, err := strconv.ParseFloat(rest[i+1:], 64)
	if err != nil || w <= 0 {
		return balance.Worker{}, false
	}
	return balance.Worker{ID: owner, Weight: w}, true
}

// PoolStatus is one pool as this replica sees it.
type PoolStatus struct {
	Name    string         `json:"name"`
	Keys    int            `json:"keys"`
	Held    int            `json:"held"`
	Target  int            `json:"target"`
	Cap     int            `json:"cap"`
	Workers map[string]int `json:"workers"` // live worker → keys it holds
	Error   string         `json:"error,omitempty"`
}

// Pools reports every pool: its keys, this replica's share and the keys
// each live worker holds.
func (s *Supervisor) Pools() []PoolStatus {
	s.mu.Lock()
	defer s.unlock()
	var out []PoolStatus
	for _, ps := range s.pools {
		st := PoolStatus{Name: ps.cfg.Name, Keys: len(ps.keys), Target: ps.plan.Target, Cap: ps.plan.Cap, Workers: map[string]int{}}
		if ps.lastErr != nil {
			st.Error = ps.lastErr.Error()
		}
		prefix := WorkerPrefix + ps.cfg.Name + "/"
		s.keeper.LiveOwners(false, func(key, owner string, _, _ bool) {
			if rest, ok := strings.CutPrefix(key, prefix); ok {
				if w, ok := parseMember(rest, owner); ok {
					st.Workers[w.ID] += 0
				}
			} else if ps.keySet[key] {
				st.Workers[owner]++
				if owner == s.owner {
					st.Held++
				}
			}
		})
		out = append(out, st)
	}
	return out
}
