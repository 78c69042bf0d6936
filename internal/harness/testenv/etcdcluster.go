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

// StartEtcdCluster starts n members and waits until every one answers and
// knows a leader.
// It skips (fails under CI=true) without the etcd binary. extra flags go
// to every member (say --auth-token).
func StartEtcdCluster(t testing.TB, n int, extra ...string) *EtcdCluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		Unavailable(t, "etcd binary not found on PATH; install etcd-server to run this test")
	}
	c := newEtcdCluster(t, bin, n, extra)
	c.run(t)
	return c
}

// newEtcdCluster lays out n members, each on ports free now, without
// starting them.
func newEtcdCluster(t testing.TB, bin string, n int, extra []string) *EtcdCluster {
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
	return c
}

// run starts c's members and waits until they are up (waitUp). Should a
// member find one of its ports taken, every member moves: the others were
// told its peer address, so the cluster is laid out anew (onFreePort).
func (c *EtcdCluster) run(t testing.TB) {
	t.Helper()
	t.Cleanup(c.stopAll)
	err := onFreePort(func() error {
		for _, m := range c.members {
			if err := c.start(m); err != nil {
				return err
			}
		}
		return c.waitUp(30 * time.Second)
	}, func() error {
		c.stopAll()
		moved := newEtcdCluster(t, c.bin, len(c.members), c.members[0].extraArgs)
		c.members, c.initial = moved.members, moved.initial
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitUp waits until every member answers and one of them leads: a
// cluster of three has a leader while one member still fails to bind its
// ports. It gives up at once, with its log, when a member has exited (a
// port taken, a bad flag).
func (c *EtcdCluster) waitUp(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		for _, m := range c.members {
			select {
			case <-m.done:
				return fmt.Errorf("etcd member %s exited while the cluster started; its log ends:\n%s",
					m.Name, logTail(filepath.Join(m.dir, "etcd.log"), 20))
			default:
			}
		}
		err := c.allUp(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("etcd cluster %s: not up within %v: %w", c.URL(), d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allUp reports why not every member answers with a leader known.
func (c *EtcdCluster) allUp(ctx context.Context) error {
	for _, m := range c.members {
		st, err := m.status(ctx)
		if err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("member %s knows no leader", m.Name)
		}
	}
	return nil
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
		st, err := m.status(ctx)
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

// status asks m for its status, giving it a second.
func (m *EtcdMember) status(ctx context.Context) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Client}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cli.Status(ctx, m.Client)
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
