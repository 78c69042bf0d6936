package chaos

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
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
	rep := runChaosWith(t, srv.url(), 25*time.Second, func(o *Options) {
		o.RestartStore = srv.restart
		o.Faults = []string{FaultStoreRestart}
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 3 {
		t.Errorf("only %d store restarts", rep.Faults[FaultStoreRestart])
	}
}

// redisServer is a redis-server this test owns.
type redisServer struct {
	t     *testing.T
	dir   string
	port  int
	extra []string // more redis-server arguments, say --replicaof
	cmd   *exec.Cmd
	done  chan struct{}
}

func startRedis(t *testing.T, extra ...string) *redisServer {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &redisServer{t: t, dir: t.TempDir(), port: port, extra: extra}
	if err := s.start(bin, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *redisServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *redisServer) url() string { return "redis://" + s.addr() + "/0" }

func (s *redisServer) start(bin string, wait time.Duration) error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"}
	cmd := exec.Command(bin, append(args, s.extra...)...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not listen on %d within %v", s.port, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// restart crashes the server (SIGKILL) and starts it again after down.
func (s *redisServer) restart(ctx context.Context, down time.Duration) error {
	s.kill()
	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return s.start(s.cmd.Path, 10*time.Second)
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
	link, err := netproxy.New(primary.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	front, err := netproxy.New(primary.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	replica := startRedisReplica(t, link)
	quarantine := DefaultTiming().TTL + DefaultTiming().Grace
	failover := func(ctx context.Context, down time.Duration) error {
		link.SetDown(true)
		err := sleepCtx(ctx, down/2)
		primary.kill()
		link.SetDown(false)
		if err != nil {
			return err
		}
		c := goredis.NewClient(&goredis.Options{Addr: replica.addr()})
		err = c.ReplicaOf(ctx, "NO", "ONE").Err()
		c.Close()
		if err != nil {
			return err
		}
		front.SetUpstream(replica.addr())
		_ = sleepCtx(ctx, max(down, quarantine)) // a cancelled run still rejoins
		// The old primary comes back as the new one's replica.
		link.SetUpstream(replica.addr())
		host, port, _ := strings.Cut(link.Addr(), ":")
		primary.extra = []string{"--replicaof", host, port}
		if err := primary.start(primary.cmd.Path, 10*time.Second); err != nil {
			return err
		}
		if err := waitSynced(ctx, primary); err != nil {
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
func startRedisReplica(t *testing.T, link *netproxy.Proxy) *redisServer {
	host, port, _ := strings.Cut(link.Addr(), ":")
	s := startRedis(t, "--replicaof", host, port)
	if err := waitSynced(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitSynced waits until the replica s reports its link to its primary up.
func waitSynced(ctx context.Context, s *redisServer) error {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis replica on %s not in sync: %v", s.addr(), err)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}
