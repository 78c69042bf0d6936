package chaos

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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
	t    *testing.T
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T) *redisServer {
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
	s := &redisServer{t: t, dir: t.TempDir(), port: port}
	if err := s.start(bin, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

func (s *redisServer) start(bin string, wait time.Duration) error {
	cmd := exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no")
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

// TestChaosPostgresStandby runs replicas against a PostgreSQL primary with
// an asynchronous streaming standby, every replica given both hosts
// (target_session_attrs=read-write) through proxies of its own, and fails
// the primary over again and again: the standby falls behind (its WAL
// stream held for half the fault's drawn downtime, 0.25-2 s), the
// primary's host dies with its replication link, the standby is promoted
// lacking what the primary acknowledged meanwhile, and the old primary
// comes back as the new one's standby from a fresh base backup. Replicas
// are killed and restarted meanwhile. The store's promotion check
// (store/postgres/promotion.go) must keep every invariant anyway; without
// it, a lost acquisition is granted again at once.
func TestChaosPostgresStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	pair := testenv.StartPostgresPair(t, testenv.Async)
	quarantine := DefaultTiming().TTL + DefaultTiming().Grace
	failover := func(ctx context.Context, down time.Duration) error {
		if err := pair.HoldReplication(); err != nil {
			return err
		}
		if err := sleepCtx(ctx, down/2); err != nil {
			return err
		}
		if err := pair.Failover(); err != nil {
			return err
		}
		// The fault lasts while no term may be granted, at least.
		_ = sleepCtx(ctx, max(down, quarantine)) // a cancelled run still rejoins
		return pair.Rejoin()
	}
	rep := runChaosWith(t, pair.URL(), 30*time.Second, func(o *Options) {
		o.RestartStore = failover
		o.Faults = []string{FaultStoreRestart, FaultKill, FaultRestart}
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 1 {
		t.Errorf("no failover")
	}
}
