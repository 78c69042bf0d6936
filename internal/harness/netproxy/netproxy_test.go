package netproxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counter is an upstream that commits every line it receives (counts it)
// and answers with the count.
type counter struct {
	ln        net.Listener
	committed atomic.Int64
	wg        sync.WaitGroup
}

func newCounter(t *testing.T) *counter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{ln: ln}
	c.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.wg.Go(func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					n := c.committed.Add(1)
					if _, err := fmt.Fprintf(conn, "%d\n", n); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); c.wg.Wait() })
	return c
}

type client struct {
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{conn: conn, r: bufio.NewReader(conn)}
}

// ask sends a request and waits up to wait for the reply.
func (c *client) ask(t *testing.T, wait time.Duration) (string, error) {
	t.Helper()
	if _, err := c.conn.Write([]byte("req\n")); err != nil {
		return "", err
	}
	return c.read(wait)
}

func (c *client) read(wait time.Duration) (string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(wait))
	return c.r.ReadString('\n')
}

func proxyTo(t *testing.T, c *counter) *Proxy {
	p, err := New(c.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestHeldRepliesStillCommit(t *testing.T) {
	up := newCounter(t)
	p := proxyTo(t, up)
	cl := dial(t, p.Addr())
	if got, err := cl.ask(t, time.Second); err != nil || got != "1\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.SetHold(true)
	if got, err := cl.ask(t, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a reply got through while held: %q, %v", got, err)
	}
	if n := up.committed.Load(); n != 2 {
		t.Fatalf("the held request was not committed upstream: %d requests committed, want 2", n)
	}
	p.SetHold(false)
	if got, err := cl.read(time.Second); err != nil || got != "2\n" {
		t.Fatalf("the held reply was not delivered late: %q, %v", got, err)
	}
}

func TestLostRepliesCommitAndCutTheConnection(t *testing.T) {
	up := newCounter(t)
	p := proxyTo(t, up)
	cl := dial(t, p.Addr())
	if _, err := cl.ask(t, time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetLose(true)
	for i, c := range []*client{cl, dial(t, p.Addr())} {
		got, err := c.ask(t, time.Second)
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("request %d while replies are lost: %q, %v; want the connection cut at once", i, got, err)
		}
	}
	if n := up.committed.Load(); n != 3 {
		t.Fatalf("%d requests committed, want 3: those whose replies were lost commit", n)
	}
	p.SetLose(false)
	if got, err := dial(t, p.Addr()).ask(t, time.Second); err != nil || got != "4\n" {
		t.Fatalf("a new connection after the fault: %q, %v", got, err)
	}
}

func TestAPartitionStallsRequestsAndBreaksTheConnectionsThatLivedThroughIt(t *testing.T) {
	up := newCounter(t)
	p := proxyTo(t, up)
	old := dial(t, p.Addr())
	if _, err := old.ask(t, time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetDown(true)
	if got, err := old.ask(t, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an answer crossed the partition: %q, %v", got, err)
	}
	during := dial(t, p.Addr())
	if got, err := during.ask(t, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection got through the partition: %q, %v", got, err)
	}
	if n := up.committed.Load(); n != 1 {
		t.Fatalf("%d requests committed, want only the one before the partition", n)
	}
	p.SetDown(false)
	for name, c := range map[string]*client{"old": old, "during": during} {
		if got, err := c.read(time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the %s connection survived the partition: %q, %v", name, got, err)
		}
	}
	if got, err := dial(t, p.Addr()).ask(t, time.Second); err != nil || got != "2\n" {
		t.Fatalf("a new connection after the partition: %q, %v", got, err)
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	up := newCounter(t)
	p := proxyTo(t, up)
	cl := dial(t, p.Addr())
	p.SetDelay(60 * time.Millisecond)
	start := time.Now()
	if _, err := cl.ask(t, time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 120*time.Millisecond {
		t.Errorf("round trip %v with 60ms each way, want at least 120ms", rtt)
	}
	p.SetDelay(0)
	start = time.Now()
	if _, err := cl.ask(t, time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt > 50*time.Millisecond {
		t.Errorf("round trip %v after the latency was removed", rtt)
	}
}

// Moving the upstream closes the connections open through the proxy, and
// new ones reach the new upstream, as a virtual IP moved to another host.
func TestSetUpstreamMovesNewConnectionsAndClosesOldOnes(t *testing.T) {
	a, b := newCounter(t), newCounter(t)
	p := proxyTo(t, a)
	old := dial(t, p.Addr())
	if got, err := old.ask(t, time.Second); err != nil || got != "1\n" {
		t.Fatalf("through the proxy to a: %q, %v", got, err)
	}
	p.SetUpstream(b.ln.Addr().String())
	if got, err := old.ask(t, time.Second); err == nil {
		t.Errorf("a connection opened before the move still answers: %q", got)
	}
	if got, err := dial(t, p.Addr()).ask(t, time.Second); err != nil || got != "1\n" || b.committed.Load() != 1 || a.committed.Load() != 1 {
		t.Errorf("a new connection: %q, %v; a committed %d, b %d; want b's first", got, err, a.committed.Load(), b.committed.Load())
	}
}
