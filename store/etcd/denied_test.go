package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// startAuthEtcd starts a private one-member etcd with authentication on,
// a root user and a user "limited" (password "pw") that may touch only
// keys under /elsewhere/, and returns its client address. Auth is never
// turned on in the shared test server.
func startAuthEtcd(t *testing.T) string {
	t.Helper()
	addr := testenv.StartEtcdCluster(t, 1).Members()[0].Client
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, "limited"); return err },
		func() error {
			_, err := c.RoleGrantPermission(ctx, "limited", "/elsewhere/", clientv3.GetPrefixRangeEnd("/elsewhere/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := c.UserAdd(ctx, "limited", "pw"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "limited", "limited"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("setting up auth, step %d: %v", i, err)
		}
	}
	return addr
}

// TestMissingRightsAreReportedAsDenied: a user whose role does not cover
// the store's prefix gets permission denied, which is store.ErrDenied —
// permanent, so the engine can give up — at Open, and on every call of a
// store made on a client of its own.
func TestMissingRightsAreReportedAsDenied(t *testing.T) {
	addr := startAuthEtcd(t)
	ctx := testenv.Context(t)
	if s, err := Open(ctx, "etcd://limited:pw@"+addr, Options{}); !errors.Is(err, store.ErrDenied) {
		if err == nil {
			s.Close()
		}
		t.Errorf("Open outside the user's keys: %v, want ErrDenied", err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Username: "limited", Password: "pw", DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrDenied) {
		t.Errorf("Acquire outside the user's keys: %v, want ErrDenied", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, store.ErrDenied) {
		t.Errorf("List outside the user's keys: %v, want ErrDenied", err)
	}
}
