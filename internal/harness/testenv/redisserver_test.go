package testenv

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestARedisServerWhosePortWasTakenStartsOnAnother takes the port a
// server was given, as an outgoing connection's local port or another
// test's server may before it binds it: it must start on another port
// and answer there, rather than fail or ping whatever holds the port.
func TestARedisServerWhosePortWasTakenStartsOnAnother(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server binary not found on PATH; install Redis (Debian: redis-server) to run this test")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	s := startRedisServer(t, bin, &RedisServer{port: taken, dir: t.TempDir()})
	if s.port == taken {
		t.Fatalf("the server is on :%d, which was taken", taken)
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the server on %s: %v", s.Addr(), err)
	}
	if s.Addr() != "127.0.0.1:"+strconv.Itoa(s.port) {
		t.Errorf("Addr %s, port %d", s.Addr(), s.port)
	}
}
