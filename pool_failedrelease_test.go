package tenure_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// flakyRelease is a store whose releases fail while fail is set (a
// connection reset, a timeout): the terms expire on their own.
type flakyRelease struct {
	*memstore.Store
	fail atomic.Bool
}

func (f *flakyRelease) Release(ctx context.Context, owner string, terms []store.Term) error {
	if f.fail.Load() {
		return fmt.Errorf("connection reset")
	}
	return f.Store.Release(ctx, owner, terms)
}

// handoverWithFailedReleases: B holds 20 keys alone; A joins and B hands
// over A's preferred keys, but B's releases fail, so each handed-over key
// expires on its own while B's membership stays live. It returns the
// longest spell a key ran nowhere, and the seconds in which B's pool
// status counted keys B no longer holds.
func handoverWithFailedReleases(t *testing.T, st *memstore.Store, fullReadEvery, failFor time.Duration) (worst time.Duration, lies int) {
	l := newLedger(t)
	src := tenure.StaticKeys(poolKeys(20)...)
	fb := &flakyRelease{Store: st}
	opt := func(c *tenure.Config) { c.FullReadEvery = fullReadEvery }
	b := poolWorkerOpts(t, fb, "B", src, l, opt).start()
	defer b.stop()
	advance(4 * renew)
	if n := l.total(); n != 20 {
		t.Fatalf("B runs %d of 20 keys", n)
	}
	fb.fail.Store(true)
	a := poolWorkerOpts(t, st, "A", src, l, opt).start()
	defer a.stop()
	since := map[string]time.Time{}
	failedAt := time.Now()
	for range 300 { // five minutes, second by second
		advance(time.Second)
		if failFor > 0 && time.Since(failedAt) >= failFor {
			fb.fail.Store(false) // the store answers releases again
		}
		held := 0
		for _, k := range poolKeys(20) {
			if b.Holds(tenure.PoolPrefix + "mail/" + k) {
				held++
			}
		}
		if d := b.Pools()[0].Held - held; d > 0 {
			lies++
		}
		l.mu.Lock()
		for _, k := range poolKeys(20) {
			if _, ok := l.running[k]; ok {
				if s, was := since[k]; was {
					worst = max(worst, time.Since(s))
					delete(since, k)
				}
			} else if _, was := since[k]; !was {
				since[k] = time.Now()
			}
		}
		l.mu.Unlock()
	}
	for _, s := range since {
		worst = max(worst, time.Since(s))
	}
	return worst, lies
}

func poolWorkerOpts(t *testing.T, st store.Store, owner string, src tenure.KeySource, l *ledger, opts ...replicaOpt) *replica {
	t.Helper()
	r := newReplica(t, st, owner, opts...)
	if err := r.AddPool(tenure.Pool{Name: "mail", Source: src, Runner: l.runner()}); err != nil {
		t.Fatal(err)
	}
	return r
}

// A key whose release failed expires in the store while its holder's
// membership stays live, so nothing pushed tells a follower: it learns at
// its next whole read. That costs at most FullReadEvery more than reading
// every round, never an unbounded wait (a vouch that revived the ended
// term kept it "held" until its holder left).
func TestAHandoverWhoseReleaseFailedWaitsAtMostOneWholeReadLonger(t *testing.T) {
	const fullReadEvery = time.Minute // the default
	var every, following time.Duration
	var lieEvery, lieFollowing int
	bubble(t, func(t *testing.T, st *memstore.Store) { every, lieEvery = handoverWithFailedReleases(t, st, renew, 0) })
	bubble(t, func(t *testing.T, st *memstore.Store) {
		following, lieFollowing = handoverWithFailedReleases(t, st, 0, 0)
	})
	t.Logf("longest unowned: %v reading every round, %v following; seconds in which B's Pools().Held overstated what it holds: %d / %d", every, following, lieEvery, lieFollowing)
	if bound := ttl + grace + fullReadEvery + renew; following > bound {
		t.Errorf("following: a key whose release failed ran nowhere for %v, want at most TTL + grace + FullReadEvery + a round = %v (every round: %v)", following, bound, every)
	}
	if bound := int((fullReadEvery + renew) / time.Second); lieFollowing > bound {
		t.Errorf("following: B's Pools().Held overstated its keys for %d s, want at most %d (every round: %d s)", lieFollowing, bound, lieEvery)
	}
}

// A release that failed for a while (a reset connection) is sent again
// each round: the key reaches its new holder at most two rounds after the
// store answers again, not when its term runs out, also for a worker that
// follows the push channel (it hears the release).
func TestAReleaseThatFailedForAWhileIsSentAgainAndTheKeyMovesWithinRounds(t *testing.T) {
	for _, fullReadEvery := range []time.Duration{renew, 0} {
		bubble(t, func(t *testing.T, st *memstore.Store) {
			const failFor = 25 * time.Second
			worst, _ := handoverWithFailedReleases(t, st, fullReadEvery, failFor)
			if bound := failFor + 2*renew; worst > bound {
				t.Errorf("FullReadEvery %v: a key whose release failed for %v ran nowhere for %v, want at most two rounds more (%v)", fullReadEvery, failFor, worst, bound)
			}
		})
	}
}
