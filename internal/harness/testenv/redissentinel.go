package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of a RedisSentinel monitor.
const SentinelMaster = "tenure"

// RedisSentinel is a Redis primary, its replica and three Sentinels
// (quorum two) that promote the replica when the primary stops
// answering, as a production Sentinel deployment does: each its own
// process and port. The replica replicates straight from the primary,
// since the Sentinels reconfigure it by the address the primary reports.
type RedisSentinel struct {
	t         testing.TB
	Servers   []*RedisServer // the first primary, then its replica
	Sentinels []*RedisServer
	down      *RedisServer // the server Failover killed, until Rejoin
}

// DownAfter is how long the Sentinels wait on a silent primary before
// they call it down and fail over.
const DownAfter = 500 * time.Millisecond

// StartRedisSentinel starts the primary with extra arguments, a replica
// in sync with it, and three Sentinels that agree on the primary.
func StartRedisSentinel(t testing.TB, extra ...string) *RedisSentinel {
	t.Helper()
	primary := StartRedis(t, extra...)
	replica := StartRedis(t, append([]string{"--replicaof", "127.0.0.1", fmt.Sprint(primary.port)}, extra...)...)
	if err := replica.WaitSynced(t.Context()); err != nil {
		t.Fatal(err)
	}
	g := &RedisSentinel{t: t, Servers: []*RedisServer{primary, replica}}
	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		// Sentinel rewrites its file as it learns, so each has its own.
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s 5000\n"+
			"sentinel parallel-syncs %[1]s 1\n",
			SentinelMaster, primary.port, DownAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		g.Sentinels = append(g.Sentinels, startRedisServer(t, primary.bin,
			&RedisServer{port: freePort(t), dir: dir, conf: conf, args: []string{"--sentinel"}}))
	}
	ctx := t.Context()
	for _, s := range g.Sentinels {
		if err := waitSentinel(ctx, s, func(c *goredis.SentinelClient) bool {
			// Each must know the replica and the other two Sentinels
			// before it can vote on and carry out a failover.
			reps, err1 := c.Replicas(ctx, SentinelMaster).Result()
			sens, err2 := c.Sentinels(ctx, SentinelMaster).Result()
			return err1 == nil && err2 == nil && len(reps) == 1 && len(sens) == 2
		}); err != nil {
			t.Fatalf("sentinel on %s did not learn its peers: %v\n%s", s.Addr(), err, s.LogTail())
		}
	}
	return g
}

// URL names the Sentinels and the master, as redis.Open reads it.
func (g *RedisSentinel) URL() string {
	q := url.Values{"master_name": {SentinelMaster}}
	for _, s := range g.Sentinels[1:] {
		q.Add("addr", s.Addr())
	}
	return "redis://" + g.Sentinels[0].Addr() + "/0?" + q.Encode()
}

// Primary is the server the Sentinels name as the master now.
func (g *RedisSentinel) Primary(ctx context.Context) (*RedisServer, error) {
	c := goredis.NewSentinelClient(&goredis.Options{Addr: g.Sentinels[0].Addr()})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return nil, err
	}
	for _, s := range g.Servers {
		if s.Addr() == addr[0]+":"+addr[1] {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the sentinels name %v, which this group did not start", addr)
}

// Failover SIGKILLs the primary and waits until every Sentinel names the
// replica as the master and the replica acts as one. It returns the
// promoted server.
func (g *RedisSentinel) Failover(ctx context.Context) (*RedisServer, error) {
	if g.down != nil {
		return nil, errors.New("testenv: a failover while the last one's server is down")
	}
	old, err := g.Primary(ctx)
	if err != nil {
		return nil, err
	}
	old.Kill()
	g.down = old
	var next *RedisServer
	for _, s := range g.Servers {
		if s != old {
			next = s
		}
	}
	for _, s := range g.Sentinels {
		if err := waitSentinel(ctx, s, func(c *goredis.SentinelClient) bool {
			addr, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
			return err == nil && addr[0]+":"+addr[1] == next.Addr()
		}); err != nil {
			return nil, fmt.Errorf("sentinel on %s did not promote %s: %w\n%s", s.Addr(), next.Addr(), err, s.LogTail())
		}
	}
	c := goredis.NewClient(&goredis.Options{Addr: next.Addr()})
	defer c.Close()
	if err := poll(ctx, 15*time.Second, func() bool {
		role, err := c.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}); err != nil {
		return nil, fmt.Errorf("%s did not become a master: %w", next.Addr(), err)
	}
	return next, nil
}

// Rejoin starts the server Failover killed again, as a replica of the
// new primary (as the Sentinels would reconfigure it, without its
// serving as an empty master meanwhile), and waits until it is in sync.
func (g *RedisSentinel) Rejoin(ctx context.Context) error {
	s := g.down
	if s == nil {
		return nil
	}
	primary, err := g.Primary(ctx)
	if err != nil {
		return err
	}
	if err := s.StartReplicaOf(ctx, primary.Addr()); err != nil {
		return err
	}
	g.down = nil
	return nil
}

// waitSentinel polls the Sentinel s until ok holds, for up to 15 s.
func waitSentinel(ctx context.Context, s *RedisServer, ok func(*goredis.SentinelClient) bool) error {
	c := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	return poll(ctx, 15*time.Second, func() bool { return ok(c) })
}

// poll calls ok every 20 ms until it holds or limit passes.
func poll(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
