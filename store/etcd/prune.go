package etcd

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/store"
)

var _ store.Pruner = (*Store)(nil)

// Prune deletes the records under prefix whose term ended at least
// olderThan ago.
//
// etcd dates nothing but leases, and a record's term ends when its live
// and grace keys are gone, which leaves no time behind. So Prune measures
// on the server's lease clock: the first prune that finds a record dead
// marks it with a timer, a lease granted then and attached to nothing; a
// later prune reads how much of the timer has run (granted TTL minus time
// left) and deletes the record once that is at least olderThan, unless the
// record changed since (the mark names the record's revision). A record is
// therefore deleted by the first prune at least olderThan (less a minute
// of slack, see ageSlack) after one that saw it dead. etcd resets every
// lease's TTL when its leader changes (unless lease checkpoints are on),
// which starts the timers again: deletion is delayed, never early.
//
// Epochs need no floor here: a key without a record starts at a revision
// above its read or its claim, so above every epoch ever written (see
// doc.go).
func (s *Store) Prune(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if err := store.ValidatePrune(olderThan); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	vs, err := s.readViews(ctx, prefix)
	if err != nil {
		return 0, s.wrap("prune", err)
	}
	running, err := s.timersRun(ctx, vs)
	if err != nil {
		return 0, s.wrap("prune", err)
	}
	timerTTL := max(ceilSeconds(olderThan)+1, minTimerSeconds)
	var deleted atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	// One timer per call, granted when a first record needs marking.
	timer := sync.OnceValues(func() (clientv3.LeaseID, error) {
		resp, err := s.client.Grant(gctx, timerTTL)
		if err != nil {
			return 0, err
		}
		return resp.ID, nil
	})
	for _, v := range vs {
		dead := v.live == nil && v.grace == nil
		m, marked := markOf(v)
		age, known := running[m.timer]
		if !known { // the timer is gone: it ran at least its whole TTL
			age = time.Duration(m.ttl) * time.Second
		}
		switch {
		case !dead:
			if v.mark != nil {
				g.Go(func() error { return s.unmark(gctx, v) })
			}
		case marked && age+ageSlack(olderThan) >= olderThan:
			g.Go(func() error {
				ok, err := s.deleteDead(gctx, v)
				if ok {
					deleted.Add(1)
				}
				return err
			})
		case marked && known: // its timer is still running
		default: // unmarked, or its timer ran out short of olderThan
			g.Go(func() error {
				id, err := timer()
				if err != nil {
					return err
				}
				return s.mark(gctx, v, mark{recRev: v.recRev, timer: id, ttl: timerTTL})
			})
		}
	}
	if err := g.Wait(); err != nil {
		return int(deleted.Load()), s.wrap("prune", err)
	}
	return int(deleted.Load()), nil
}

// ageSlack is how much younger than olderThan a marked record may be and
// still go: a daily prune with --older-than 24h finds its marks a few
// seconds short of a day old. A record counts as dead only once its live
// and grace keys are gone, its grace long over, so going a little early
// costs a little history, never safety.
func ageSlack(olderThan time.Duration) time.Duration {
	return min(olderThan/10, time.Minute)
}

// minTimerSeconds is the shortest timer a mark gets: a day, so a later
// prune with a longer age can still read how long a record has been dead.
const minTimerSeconds = 24 * 3600

// mark is the value of a mark key.
type mark struct {
	recRev int64            // the record's mod revision when marked
	timer  clientv3.LeaseID // granted when marked, attached to nothing
	ttl    int64            // the timer's granted TTL, seconds
}

func (m mark) encode() string {
	return strconv.FormatInt(m.recRev, 10) + "\t" + strconv.FormatInt(int64(m.timer), 10) + "\t" + strconv.FormatInt(m.ttl, 10)
}

// markOf parses v's mark and reports whether it marks v's current record.
func markOf(v *view) (mark, bool) {
	if v.mark == nil {
		return mark{}, false
	}
	f := strings.Split(string(v.mark.Value), "\t")
	if len(f) != 3 {
		return mark{}, false
	}
	rev, err1 := strconv.ParseInt(f[0], 10, 64)
	id, err2 := strconv.ParseInt(f[1], 10, 64)
	ttl, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || rev != v.recRev {
		return mark{}, false
	}
	return mark{recRev: rev, timer: clientv3.LeaseID(id), ttl: ttl}, true
}

// timersRun asks once per distinct timer of the marks in vs how long it
// has run: granted TTL minus time left, less a second since etcd rounds
// the time left down. Timers that are gone are missing from the map.
func (s *Store) timersRun(ctx context.Context, vs []*view) (map[clientv3.LeaseID]time.Duration, error) {
	var ids []clientv3.LeaseID
	seen := map[clientv3.LeaseID]bool{}
	for _, v := range vs {
		if m, ok := markOf(v); ok && !seen[m.timer] {
			seen[m.timer] = true
			ids = append(ids, m.timer)
		}
	}
	resps, err := s.leaseTTLs(ctx, ids)
	if err != nil {
		return nil, err
	}
	run := make(map[clientv3.LeaseID]time.Duration, len(resps))
	for id, resp := range resps {
		if resp.TTL >= 0 { // -1 once the lease is gone
			run[id] = time.Duration(resp.GrantedTTL-resp.TTL-1) * time.Second
		}
	}
	return run, nil
}

// mark writes m as v's mark, if v's record is still the one read.
func (s *Store) mark(ctx context.Context, v *view, m mark) error {
	_, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.recordKey(v.key)), "=", v.recRev)).
		Then(clientv3.OpPut(s.markKey(v.key), m.encode())).
		Commit()
	return err
}

// unmark drops the mark of a record that lives again.
func (s *Store) unmark(ctx context.Context, v *view) error {
	_, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.markKey(v.key)), "=", v.mark.ModRevision)).
		Then(clientv3.OpDelete(s.markKey(v.key))).
		Commit()
	return err
}

// deleteDead deletes v's record and mark if the record is unchanged and
// its term still has neither a live nor a grace key.
func (s *Store) deleteDead(ctx context.Context, v *view) (bool, error) {
	resp, err := s.client.Txn(ctx).
		If(
			clientv3.Compare(clientv3.ModRevision(s.recordKey(v.key)), "=", v.recRev),
			clientv3.Compare(clientv3.CreateRevision(s.liveKey(v.key)), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(s.graceKey(v.key)), "=", 0),
		).
		Then(clientv3.OpDelete(s.recordKey(v.key)), clientv3.OpDelete(s.markKey(v.key))).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
