package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// The shared suites, through three Sentinels to the master they name: the
// store's scripts and its pub/sub behave on a Sentinel-managed master as
// on one server.
func TestConformanceThroughSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary, a replica and three Sentinels")
	}
	g := testenv.StartRedisSentinel(t)
	open := func(t *testing.T, ns string) store.Store {
		return testenv.Open(t, func(ctx context.Context) (*Store, error) {
			return Open(ctx, g.URL(), Options{Namespace: ns})
		}, nil)
	}
	fresh := func(t *testing.T) store.Store { return open(t, randomNamespace()) }
	peer := func(t *testing.T, s store.Store) store.Store { return open(t, s.(*Store).namespace) }
	storetest.Run(t, storetest.Harness{New: fresh, Advance: storetest.Sleep})
	storetest.RunWatchTests(t, storetest.WatchHarness{New: fresh, Peer: peer})
}

// A Store opened from a Sentinel URL follows the master through a
// failover the Sentinels carry out: a term that reached the replica
// renews on the promoted one; the new replication id starts a quarantine
// (a term acknowledged only by the dead primary may be lost, see
// TestAPromotedReplicaGrantsNoLostTermAtOnce); after it, the key is
// granted above every earlier epoch. A watch on the dead primary ends (a
// caller polls and watches again, as the engine does), and a new one, on
// the new master, reports a release.
func TestASentinelFailoverIsFollowedAndQuarantined(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary, a replica and three Sentinels")
	}
	const (
		keptTTL = 30 * time.Second // outlasts the failover by far
		ttl     = time.Second      // the quarantine lasts ttl + grace
		grace   = 500 * time.Millisecond
	)
	g := testenv.StartRedisSentinel(t)
	ctx := testenv.Context(t)
	s, err := Open(ctx, g.URL(), Options{Namespace: randomNamespace()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kept := testenv.MustAcquire(t, s, "kept", "a", keptTTL, grace)
	old, err := g.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := old.Client().Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	events, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	promoted, err := g.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The client learns of the switch from the Sentinels; until then its
	// calls may fail on the dead primary's address.
	var ok []bool
	if err := eventually(ctx, func() (err error) {
		ok, err = s.Renew(ctx, "a", keptTTL, []store.RenewItem{{Key: "kept", Epoch: kept}})
		return err
	}); err != nil {
		t.Fatalf("Renew after the failover: %v", err)
	}
	if !ok[0] {
		t.Fatalf("the replicated term on %q was not renewed on the promoted master %s", "kept", promoted.Addr())
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("%q was granted at once on the promoted master: no quarantine", "job")
	}
	for !res.Acquired {
		time.Sleep(50 * time.Millisecond)
		if res, err = s.Acquire(ctx, store.AcquireRequest{Key: "job", Owner: "b", TTL: ttl, Grace: grace}); err != nil {
			t.Fatal(err)
		}
	}
	if res.Epoch <= kept {
		t.Errorf("epoch %d after the quarantine is not above %d, granted before the failover", res.Epoch, kept)
	}
	for range events {
	} // ends: its connection died with the primary
	if events, err = s.Watch(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "b", []store.Term{{Key: "job", Epoch: res.Epoch}}); err != nil {
		t.Fatal(err)
	}
	for e := range events {
		if e.Key == "job" && e.Kind == store.Released {
			return
		}
	}
	t.Fatalf("the watch on the new master ended without reporting the release of %q", "job")
}

// eventually retries call every 50 ms until it returns nil, for up to
// 15 s; it returns the last error.
func eventually(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := call()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Sentinel URLs that cannot work are refused before anything is dialled,
// and no password, the Sentinels' included, appears in the error.
func TestBadSentinelURLsAreRefusedWithoutTheirSecrets(t *testing.T) {
	const pw, spw = "s3cret-pw", "s3ntinel-pw"
	for _, tc := range []struct{ url, want string }{
		{"redis://:" + pw + "@127.0.0.1:1/0?master_name=", "master_name= is empty"},
		{"redis://127.0.0.1:1/0?master_name=m&password=" + pw, "password= is not read"},
		{"redis://127.0.0.1:1/0?master_name=m&username=u", "username= is not read"},
		{"redis://127.0.0.1:1/0?master_name=m&replica_only=true", "replica_only= sends calls to replicas"},
		{"redis://127.0.0.1:1/0?master_name=m&route_randomly=true", "route_randomly= sends calls to replicas"},
		{"redis://:" + pw + "@127.0.0.1:1/0?master_name=m&sentinel_password=" + spw + "&bogus=1", "unexpected option: bogus"},
		{"redis://127.0.0.1:1/x?master_name=m&sentinel_password=" + spw, "invalid database number"},
		{"redis://127.0.0.1:1/0?master_name=m&addr=nohost", "unable to parse addr"},
	} {
		err := openURL(context.Background(), tc.url)
		if !errors.Is(err, store.ErrInvalidURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v; want store.ErrInvalidURL saying %q", store.RedactURL(tc.url), err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), spw)) {
			t.Errorf("Open's error shows a password: %v", err)
		}
	}
}

// A Sentinel nobody runs is an error naming the URL without its secrets,
// within the caller's deadline.
func TestAnUnreachableSentinelIsAClearError(t *testing.T) {
	const pw, spw = "s3cret-pw", "s3ntinel-pw"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	url := "redis://u:" + pw + "@" + testenv.ClosedAddr(t) + "/0?master_name=m&sentinel_password=" + spw
	err := openURL(ctx, url)
	if err == nil || !strings.Contains(err.Error(), "connect to redis://u:") {
		t.Fatalf("Open on a closed port = %v; want a connect error naming the URL", err)
	}
	if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), spw) {
		t.Errorf("Open's error shows a password: %v", err)
	}
}
