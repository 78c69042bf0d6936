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
	// Every command, but only keys no namespace of this test uses.
	userURL, _ := aclUser(t, "tenure_norights_", "~elsewhere:*", "&*", "+@all")
	s, err := Open(ctx, userURL, Options{Namespace: testenv.UniqueName("denied_")})
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

// An ACL user without INFO (in @dangerous, which many deny) still
// acquires: it cannot tell its server, so it checks nothing and names
// nothing, but it keeps to a quarantine a client that can has started.
func TestAUserWithoutInfoAcquiresAndKeepsToAQuarantine(t *testing.T) {
	ctx := testenv.Context(t)
	base := testenv.Redis.URL(t)
	userURL, admin := aclUser(t, "tenure_noinfo_", "~*", "&*", "+@all", "-@dangerous")
	ns := testenv.UniqueName("noinfo_")
	limited, err := Open(ctx, userURL, Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()
	full, err := Open(ctx, base, Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dropNamespace(context.Background(), base, full); full.Close() }()

	req := store.AcquireRequest{Key: "k0", Owner: "o", TTL: time.Minute, Grace: time.Second}
	if res, err := full.Acquire(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	named, err := admin.HGet(ctx, full.keys[0], serverField).Result()
	if err != nil {
		t.Fatalf("the server is not named after an acquisition: %v", err)
	}
	req.Key = "k1"
	if res, err := limited.Acquire(ctx, req); err != nil || !res.Acquired {
		t.Fatalf("Acquire by a user without INFO: %+v, %v", res, err)
	}
	if got, _ := admin.HGet(ctx, full.keys[0], serverField).Result(); got != named {
		t.Errorf("a user without INFO changed the server's name from %q to %q", named, got)
	}
	// A failover as the full client sees it: another server was named.
	if err := admin.HSet(ctx, full.keys[0], serverField, "0000000000000000000000000000000000000000,0").Err(); err != nil {
		t.Fatal(err)
	}
	req.Key = "k2"
	if res, err := full.Acquire(ctx, req); err != nil || res.Acquired {
		t.Fatalf("Acquire right after a change of server: %+v, %v; want a refusal", res, err)
	}
	req.Key = "k3"
	if res, err := limited.Acquire(ctx, req); err != nil || res.Acquired || !res.Holder.Live {
		t.Errorf("Acquire by a user without INFO during the quarantine: %+v, %v; want a refusal", res, err)
	}
}

// aclUser makes an ACL user with rules on the test server, deleted when
// the test ends, and returns a URL that logs in as it and an admin client.
// It skips on a Redis without ACLs.
func aclUser(t *testing.T, prefix string, rules ...string) (string, *goredis.Client) {
	t.Helper()
	ctx := testenv.Context(t)
	base := testenv.Redis.URL(t)
	opts, err := goredis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(opts)
	t.Cleanup(func() { admin.Close() })
	user := testenv.UniqueName(prefix)
	args := append([]any{"ACL", "SETUSER", user, "on", "nopass"}, anys(rules)...)
	if err := admin.Do(ctx, args...).Err(); err != nil {
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
	return u.String(), admin
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
