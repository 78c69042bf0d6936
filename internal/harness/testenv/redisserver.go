package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisFsyncEveryWrite are redis-server arguments that make a server keep
// every write it acknowledged across a crash: AOF, fsynced before each
// reply. Without them a private server keeps nothing.
var RedisFsyncEveryWrite = []string{"--appendonly", "yes", "--appendfsync", "always"}

// RedisServer is a redis-server process owned by one test, never the
// machine's shared one, on a port of its own.
type RedisServer struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	conf string // a config file to start from (Sentinel's), or ""
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts a private redis-server with extra arguments (by
// default it saves nothing: a restart comes back empty) and stops it when
// the test ends. It skips (fails under CI=true) when redis-server is not
// installed.
func StartRedis(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server binary not found on PATH; install Redis (Debian: redis-server) to run this test")
	}
	return startRedisServer(t, bin, &RedisServer{port: freePort(t), dir: t.TempDir(), args: extra})
}

// startRedisServer starts s, on another port should something have bound
// the one the caller chose (onFreePort).
func startRedisServer(t testing.TB, bin string, s *RedisServer) *RedisServer {
	t.Helper()
	s.t, s.bin = t, bin
	t.Cleanup(s.Kill)
	err := onFreePort(s.Start, func() error {
		port, err := pickPort()
		if err == nil {
			s.port = port
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is a redis:// URL for database 0 of the server.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Dir is the server's working directory (its AOF, log and config).
func (s *RedisServer) Dir() string { return s.dir }

// Start starts the server (again, after Kill) on its port and waits until
// it answers PING.
func (s *RedisServer) Start() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf) // a config file must come first
	}
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--daemonize", "no",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"))
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			// It exited (a port taken, a bad argument): waiting on would
			// only ping whatever else listens there.
			s.cmd = nil
			return fmt.Errorf("redis-server on %s exited: %v\n%s", s.Addr(), err, s.LogTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.Addr(), err, s.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LogTail is the end of the server's log, for an error message.
func (s *RedisServer) LogTail() string {
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(log[max(0, len(log)-4000):])
}

// Kill SIGKILLs the server and waits until it is gone.
func (s *RedisServer) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart crashes the server (SIGKILL) and starts it again after down.
func (s *RedisServer) Restart(ctx context.Context, down time.Duration) error {
	s.Kill()
	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return s.Start()
}

// StartReplicaOf starts the server again (after Kill) as a replica of
// the server at addr, with its other arguments as before, and waits until
// it is in sync.
func (s *RedisServer) StartReplicaOf(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	s.args = append(slices.Clone(s.args), "--replicaof", host, port) // the last one counts
	if err := s.Start(); err != nil {
		return err
	}
	return s.WaitSynced(ctx)
}

// Client returns a go-redis client for the server that honours deadlines,
// closed when the test ends.
func (s *RedisServer) Client() *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// WaitSynced waits until the replica s reports its link to its primary up.
func (s *RedisServer) WaitSynced(ctx context.Context) error {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	var info string
	if err := poll(ctx, 10*time.Second, func() bool {
		info, _ = c.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	}); err != nil {
		return fmt.Errorf("redis replica on %s not in sync: %w\n%s", s.Addr(), err, info)
	}
	return nil
}
