package redis

import (
	"context"
	"testing"

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
