package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// clusterStore opens a store on c in a fresh namespace of its own.
func clusterStore(t testing.TB, c *testenv.EtcdCluster) *Store {
	t.Helper()
	return testenv.Open(t, func(ctx context.Context) (*Store, error) {
		return Open(ctx, c.URL(), Options{Prefix: randomPrefix()})
	}, nil)
}

// TestConformanceOnAThreeMemberCluster runs the shared suite against a
// cluster of three member processes, the client given every endpoint, as
// a user who outgrew one server runs etcd.
func TestConformanceOnAThreeMemberCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd cluster")
	}
	c := testenv.StartEtcdCluster(t, 3)
	storetest.Run(t, storetest.Harness{
		New:       func(t *testing.T) store.Store { return clusterStore(t, c) },
		Advance:   storetest.Sleep,
		Unit:      time.Second,
		Tolerance: 750 * time.Millisecond,
		// Terms share their owner's session (session.go).
		SharedExpiry: true,
	})
}

// TestTermsSurviveTheLossOfTheLeaderAndOfAFollower kills the leader
// member, then a follower, each time restarting it on its data: every term
// stays its holder's (renewals go through once a leader is elected, the
// epochs do not move) and a peer is refused throughout.
func TestTermsSurviveTheLossOfTheLeaderAndOfAFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd cluster")
	}
	c := testenv.StartEtcdCluster(t, 3)
	s := clusterStore(t, c)
	peer, err := New(clientOf(t, c.URL()), Options{Prefix: s.prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t)
	const ttl = 10 * time.Second
	var items []store.RenewItem
	for _, key := range []string{"a", "b", "c", "d"} {
		e := testenv.MustAcquire(t, s, key, "holder", ttl, 2*time.Second)
		items = append(items, store.RenewItem{Key: key, Epoch: e, Running: true})
	}
	for _, victim := range []string{"leader", "follower"} {
		leader, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := leader
		if victim == "follower" {
			for _, other := range c.Members() {
				if other != leader {
					m = other
					break
				}
			}
		}
		killed := time.Now()
		c.Kill(m)
		// Renew as the engine does, every few seconds, until a renewal is
		// confirmed; each answer is renewed, or an error (unconfirmed),
		// never lost.
		var renewedAfter time.Duration
		for renewedAfter == 0 {
			if time.Since(killed) > ttl {
				t.Fatalf("no renewal confirmed within the %v TTL after the %s (%s) was killed", ttl, victim, m.Name)
			}
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			ok, err := s.Renew(rctx, "holder", ttl, items)
			cancel()
			switch {
			case err != nil:
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for i, renewed := range ok {
				if !renewed {
					t.Fatalf("after the %s was killed, the term of %q was reported lost", victim, items[i].Key)
				}
			}
			renewedAfter = time.Since(killed)
		}
		t.Logf("%s %s killed: renewals confirmed again after %v", victim, m.Name, renewedAfter.Round(time.Millisecond))
		for _, it := range items {
			res, err := peer.Acquire(ctx, store.AcquireRequest{Key: it.Key, Owner: "peer", TTL: ttl, Grace: 2 * time.Second})
			if err != nil || res.Acquired {
				t.Fatalf("peer acquiring %q after the %s was killed: %+v, %v; want refused", it.Key, victim, res, err)
			}
			if l := testenv.LeaseOf(t, s, it.Key); l.Epoch != it.Epoch || l.Owner != "holder" || !l.Live {
				t.Fatalf("%q after the %s was killed: %+v, want the holder's live term %d", it.Key, victim, l, it.Epoch)
			}
		}
		if err := c.Restart(m); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitLeader(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
