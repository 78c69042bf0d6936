package redis

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func randomNamespace() string { return testenv.UniqueName("t_") }

// newTestStore opens a store on the shared test Redis in a fresh namespace,
// deleting the namespace's keys when the test ends.
func newTestStore(t testing.TB) *Store {
	t.Helper()
	url := testenv.Redis.URL(t)
	ns := randomNamespace()
	return testenv.Open(t, func(ctx context.Context) (*Store, error) {
		return Open(ctx, url, Options{Namespace: ns})
	}, func(ctx context.Context, s *Store) error { return dropNamespace(ctx, url, s) })
}

// dropNamespace deletes a store's keys, through a client of its own when
// the test closed the store.
func dropNamespace(ctx context.Context, url string, s *Store) error {
	if !s.isClosed() {
		return s.client.Del(ctx, s.keys...).Err()
	}
	o, err := goredis.ParseURL(url)
	if err != nil {
		return err
	}
	c := goredis.NewClient(o)
	defer c.Close()
	return c.Del(ctx, s.keys...).Err()
}

// openURL opens and closes a store on rawURL, for the tests of Open's
// errors.
func openURL(ctx context.Context, rawURL string) error {
	s, err := Open(ctx, rawURL, Options{})
	if err == nil {
		s.Close()
	}
	return err
}

// freePort returns a TCP port on 127.0.0.1 with nothing listening.
func freePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(testenv.ClosedAddr(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// redisServer is a redis-server process owned by one test, never the
// machine's shared one.
type redisServer struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startRedis starts a private, non-persistent redis-server on a free port.
// It skips (fails under CI=true) when redis-server is not installed.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server binary not found on PATH; install Redis to run this test")
	}
	srv := &redisServer{t: t, bin: bin, port: freePort(t), dir: t.TempDir(), args: extra}
	srv.start()
	t.Cleanup(srv.stop)
	return srv
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server; with --save "" and no AOF every key is lost.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// restart stops the server and starts an empty one on the same port.
func (s *redisServer) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// client returns a go-redis client for the server that honours deadlines,
// closed when the test ends.
func (s *redisServer) client() *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}
