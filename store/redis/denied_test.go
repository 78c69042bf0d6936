package redis

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// TestMissingRightsAreReportedAsDenied: an ACL user without the keys of
// the namespace gets NOPERM, which is store.ErrDenied — permanent, so the
// engine can give up.
func TestMissingRightsAreReportedAsDenied(t *testing.T) {
	ctx := testenv.Context(t)
	base := testenv.Redis.URL(t)
	opts, err := goredis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(opts)
	defer admin.Close()
	user := testenv.UniqueName("tenure_norights_")
	// Every command, but only keys no namespace of this test uses.
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~elsewhere:*", "&*", "+@all").Err(); err != nil {
		t.Skipf("this Redis has no ACLs (Redis 6 or later): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		admin.Do(ctx, "ACL", "DELUSER", user)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, "any")
	s, err := Open(ctx, u.String(), Options{Namespace: testenv.UniqueName("denied_")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "o", TTL: time.Second})
	if !errors.Is(err, store.ErrDenied) {
		t.Errorf("Acquire without rights on the namespace's keys: %v, want ErrDenied", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, store.ErrDenied) {
		t.Errorf("List without rights on the namespace's keys: %v, want ErrDenied", err)
	}
}
