package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdCluster is a private etcd cluster a test owns: each member its own
// process, ports and data directory, so a test can kill the leader, kill
// a follower, and restart a member with its data. The machine's shared
// etcd is never touched.
type EtcdCluster struct {
	bin     string
	members []*EtcdMember
	initial string // --initial-cluster
	token   string // --initial-cluster-token, the same for every member

	mu sync.Mutex
}

// EtcdMember is one member process of an EtcdCluster.
type EtcdMember struct {
	Name      string
	Client    string // host:port clients dial
	peer      string
	dir       string
	cmd       *exec.Cmd
	done      chan struct{}
	extraArgs []string
}

// StartEtcdCluster starts n members and waits until they have a leader.
// It skips (fails under CI=true) without the etcd binary. extra flags go
// to every member (say --auth-token).
func StartEtcdCluster(t testing.TB, n int, extra ...string) *EtcdCluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		Unavailable(t, "etcd binary not found on PATH; install etcd-server to run this test")
	}
	c := &EtcdCluster{bin: bin, token: UniqueName("tenure-test-")}
	var initial []string
	for i := range n {
		m := &EtcdMember{
			Name:      fmt.Sprintf("m%d", i),
			Client:    ClosedAddr(t),
			peer:      ClosedAddr(t),
			dir:       t.TempDir(),
			extraArgs: extra,
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"=http://"+m.peer)
	}
	c.initial = strings.Join(initial, ",")
	for _, m := range c.members {
		if err := c.start(m); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.stopAll)
	if _, err := c.WaitLeader(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

// URL is an etcd:// URL listing every member.
func (c *EtcdCluster) URL() string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Client
	}
	return "etcd://" + strings.Join(eps, ",")
}

// Members returns the members in start order.
func (c *EtcdCluster) Members() []*EtcdMember { return c.members }

func (c *EtcdCluster) start(m *EtcdMember) error {
	args := append([]string{
		"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", "http://" + m.Client, "--advertise-client-urls", "http://" + m.Client,
		"--listen-peer-urls", "http://" + m.peer, "--initial-advertise-peer-urls", "http://" + m.peer,
		"--initial-cluster", c.initial, "--initial-cluster-state", "new",
		"--initial-cluster-token", c.token,
	}, m.extraArgs...)
	cmd := exec.Command(c.bin, args...)
	log, err := os.OpenFile(filepath.Join(m.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// Kill SIGKILLs m and waits until it is gone; its data stays.
func (c *EtcdCluster) Kill(m *EtcdMember) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	m.cmd = nil
}

// Restart starts a killed member again on its data.
func (c *EtcdCluster) Restart(m *EtcdMember) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.cmd != nil {
		return nil
	}
	return c.start(m)
}

// Leader returns the member that leads now, asking the members that
// answer.
func (c *EtcdCluster) Leader(ctx context.Context) (*EtcdMember, error) {
	var errs []error
	for _, m := range c.members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Client}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.Client)
		cancel()
		cli.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Leader == 0 {
			continue
		}
		if st.Leader == st.Header.MemberId {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no member says it leads: %w", errors.Join(errs...))
}

// WaitLeader waits up to d for a member to lead.
func (c *EtcdCluster) WaitLeader(d time.Duration) (*EtcdMember, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		m, err := c.Leader(ctx)
		if err == nil {
			return m, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("etcd cluster %s: no leader within %v: %w", c.URL(), d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *EtcdCluster) stopAll() {
	for _, m := range c.members {
		c.Kill(m)
	}
}
