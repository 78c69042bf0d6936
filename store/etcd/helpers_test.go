package etcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func randomPrefix() string { return testenv.UniqueName("t_") }

// newTestStore opens a store on the shared test etcd in a fresh namespace,
// deleting the namespace and revoking its leases when the test ends.
func newTestStore(t testing.TB) *Store {
	t.Helper()
	return newTestStoreWith(t, Options{})
}

func newTestStoreWith(t testing.TB, opts Options) *Store {
	t.Helper()
	url := testenv.Etcd.URL(t)
	if opts.Prefix == "" {
		opts.Prefix = randomPrefix()
	}
	return testenv.Open(t, func(ctx context.Context) (*Store, error) {
		return Open(ctx, url, opts)
	}, func(context.Context, *Store) error {
		dropNamespace(t, opts.Prefix)
		return nil
	})
}

// testClient returns a client of the test etcd, closed when the test ends.
func testClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return clientOf(t, testenv.Etcd.URL(t))
}

// clientOf returns a client of the etcd at url, closed when the test ends.
func clientOf(t testing.TB, url string) *clientv3.Client {
	t.Helper()
	cfg, _, err := parseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = zap.NewNop()
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dropNamespace revokes the leases a namespace's keys are on and deletes
// the keys, through a client of its own, since the test may have closed
// the store. Benchmarks grant leases of an hour; they must not linger.
func dropNamespace(t testing.TB, prefix string) {
	t.Helper()
	c := testClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	root := "/" + prefix + "/"
	resp, err := c.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Errorf("dropping namespace %s: %v", prefix, err)
		return
	}
	var ids []clientv3.LeaseID
	seen := map[int64]bool{}
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 && !seen[kv.Lease] {
			seen[kv.Lease] = true
			ids = append(ids, clientv3.LeaseID(kv.Lease))
		}
	}
	revokeAll(ctx, c, ids)
	if _, err := c.Delete(ctx, root, clientv3.WithPrefix()); err != nil {
		t.Errorf("dropping namespace %s: %v", prefix, err)
	}
}

// revokeAll revokes leases, sixteen at a time; leases already gone are
// fine.
func revokeAll(ctx context.Context, c *clientv3.Client, ids []clientv3.LeaseID) {
	var g errgroup.Group
	g.SetLimit(parallel)
	for _, id := range ids {
		g.Go(func() error {
			_, _ = c.Revoke(ctx, id)
			return nil
		})
	}
	_ = g.Wait()
}
