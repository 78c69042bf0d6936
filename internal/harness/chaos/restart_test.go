package chaos

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/netproxy"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// TestChaosRedisRestarts crashes the store itself, again and again, on a
// redis-server of its own that fsyncs every write before answering, so a
// crash loses nothing it acknowledged. The other faults are covered by the
// other tests; here every step is a store restart.
func TestChaosRedisRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	srv := startRedis(t)
	rep := runChaosWith(t, srv.URL(), 25*time.Second, func(o *Options) {
		o.RestartStore = srv.Restart
		o.Faults = []string{FaultStoreRestart}
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 3 {
		t.Errorf("only %d store restarts", rep.Faults[FaultStoreRestart])
	}
}

// startRedis starts a private redis-server that fsyncs every write before
// answering: a crash loses nothing it acknowledged.
func startRedis(t *testing.T, extra ...string) *testenv.RedisServer {
	return testenv.StartRedis(t, append(slices.Clone(testenv.RedisFsyncEveryWrite), extra...)...)
}

// TestChaosEtcdCluster runs replicas against a three-member etcd cluster,
// each replica given every endpoint (each through a proxy of its own), and
// SIGKILLs one member again and again — the leader and a follower in turn
// — restarting it on its data, while replicas are killed and restarted:
// leader changes in the middle of renewals, takeovers and handoffs. The
// other fault kinds are covered on one member by TestChaosEtcd.
func TestChaosEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	c := testenv.StartEtcdCluster(t, 3)
	var kills atomic.Int64
	restart := func(ctx context.Context, down time.Duration) error {
		victim, err := c.Leader(ctx)
		if err != nil {
			return err
		}
		if kills.Add(1)%2 == 0 { // every other time a follower
			for _, m := range c.Members() {
				if m != victim {
					victim = m
					break
				}
			}
		}
		c.Kill(victim)
		timer := time.NewTimer(down)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		if err := c.Restart(victim); err != nil {
			return err
		}
		_, err = c.WaitLeader(30 * time.Second)
		return err
	}
	rep := runChaosWith(t, c.URL(), 30*time.Second, func(o *Options) {
		o.RestartStore = restart
		// Replicas killed and restarted too, two faults at a time, so
		// takeovers and handoffs happen while the leader changes.
		o.Faults = []string{FaultStoreRestart, FaultKill, FaultRestart}
		o.Concurrency = 2
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 1 {
		t.Errorf("no member was killed")
	}
}

// TestChaosRedisFailover runs replicas against a Redis primary with an
// asynchronous replica, reached at one address that moves to the replica
// when it is promoted, as a virtual IP a failover manager moves would.
// Each failover cuts the replication link for half the fault's drawn
// downtime first (the replica falls behind), SIGKILLs the primary,
// promotes the replica (REPLICAOF NO ONE) and moves the address; the old
// primary comes back as the new one's replica. Replicas are killed and
// restarted meanwhile. The store's server check (store/redis, "Failover")
// must keep every invariant anyway.
func TestChaosRedisFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	primary := startRedis(t)
	link, err := netproxy.New(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	front, err := netproxy.New(primary.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	replica := startRedisReplica(t, link)
	quarantine := DefaultTiming().TTL + DefaultTiming().Grace
	failover := func(ctx context.Context, down time.Duration) error {
		link.SetDown(true)
		err := sleepCtx(ctx, down/2)
		primary.Kill()
		link.SetDown(false)
		if err != nil {
			return err
		}
		c := goredis.NewClient(&goredis.Options{Addr: replica.Addr()})
		err = c.ReplicaOf(ctx, "NO", "ONE").Err()
		c.Close()
		if err != nil {
			return err
		}
		front.SetUpstream(replica.Addr())
		_ = sleepCtx(ctx, max(down, quarantine)) // a cancelled run still rejoins
		// The old primary comes back as the new one's replica.
		link.SetUpstream(replica.Addr())
		if err := primary.StartReplicaOf(ctx, link.Addr()); err != nil {
			return err
		}
		primary, replica = replica, primary
		return nil
	}
	rep := runChaosWith(t, "redis://"+front.Addr()+"/0", 30*time.Second, func(o *Options) {
		o.RestartStore = failover
		o.Faults = []string{FaultStoreRestart, FaultKill, FaultRestart}
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 1 {
		t.Errorf("no failover")
	}
}

// startRedisReplica starts a redis-server replicating through link, and
// waits until it is in sync.
func startRedisReplica(t *testing.T, link *netproxy.Proxy) *testenv.RedisServer {
	host, port, _ := strings.Cut(link.Addr(), ":")
	s := startRedis(t, "--replicaof", host, port)
	if err := s.WaitSynced(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChaosRedisSentinel runs replicas against a primary, its replica and
// three Sentinels, every replica given the Sentinel URL. Each store
// restart SIGKILLs the primary and waits until the Sentinels have
// promoted the replica; the old primary comes back as the new one's
// replica after the fault's downtime. The network faults are played in
// each replica's store recorder, since the Sentinels hand out the
// master's address at run time (see backend.networked).
func TestChaosRedisSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	g := testenv.StartRedisSentinel(t)
	failover := func(ctx context.Context, down time.Duration) error {
		if _, err := g.Failover(ctx); err != nil {
			return err
		}
		_ = sleepCtx(ctx, down) // a cancelled run still rejoins
		return g.Rejoin(context.WithoutCancel(ctx))
	}
	rep := runChaosWith(t, g.URL(), 30*time.Second, func(o *Options) {
		o.RestartStore = failover
		o.Faults = []string{FaultStoreRestart, FaultKill, FaultPartition, FaultPause}
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 1 {
		t.Errorf("no failover")
	}
}
