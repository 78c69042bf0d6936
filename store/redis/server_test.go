package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// The tests in this file start their own redis-server, so they can restart
// it, run it as a cluster or pause it without disturbing the shared one.

func TestEpochsKeepRisingAfterARestartThatLostAllData(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := New(srv.Client(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := testenv.Context(t)

	var last int64
	for i := range 5 {
		e := testenv.MustAcquire(t, s, "nightly-report", "worker-1", time.Minute, time.Minute)
		if e <= last {
			t.Fatalf("acquisition %d: epoch %d not above %d", i, e, last)
		}
		last = e
	}

	// --save "" and no AOF: every record and the script cache are gone.
	if err := srv.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := s.client.Exists(ctx, s.keys...).Result(); err != nil || n != 0 {
		t.Fatalf("after the restart %d of the namespace's keys exist (err %v); the test needs them lost", n, err)
	}

	// The same Store and client carry on: go-redis reconnects, and EVALSHA
	// falls back to EVAL for the emptied script cache. The Store has seen
	// the namespace before, so an empty one means lost data and holders
	// that may still run: nothing with a grace is granted for TTL + grace.
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "nightly-report", Owner: "worker-2", TTL: time.Minute, Grace: time.Minute})
	if err != nil || res.Acquired || !res.Holder.Live || res.Holder.TimeLeft > time.Minute {
		t.Fatalf("Acquire right after the data loss: %+v, %v; want a refusal for the quarantine", res, err)
	}
	// Epochs still rise: a record without grace is not held back.
	next := testenv.MustAcquire(t, s, "nightly-report", "worker-2", time.Minute, 0)
	if next <= last {
		t.Fatalf("first epoch after the data loss is %d, not above %d from before it: a stale holder could write again", next, last)
	}
	leases, err := s.List(ctx, "")
	if err != nil || len(leases) != 1 || leases[0].Owner != "worker-2" || leases[0].Epoch != next {
		t.Fatalf("List after the restart = %+v, %v", leases, err)
	}
}

func TestWatchChannelClosesWhenTheServerGoesAway(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := New(srv.Client(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := s.Watch(testenv.Context(t), "")
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// A closed channel tells the engine to poll and watch again; events
	// published while nobody listened are gone.
	testenv.WaitClosed(t, events)
}

func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	const password = "hunter2-s3cret"
	addr := testenv.ClosedAddr(t)
	errs := storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"closed port":      "redis://app:" + password + "@" + addr + "/0?dial_timeout=200ms&max_retries=-1",
		"closed port, TLS": "rediss://:" + password + "@" + addr + "/0?dial_timeout=200ms&max_retries=-1",
	}, nil, password, "hunter2")
	for name, err := range errs {
		if err != nil && !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: the error does not say which server failed: %v", name, err)
		}
	}
	storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"unknown option": "redis://app:" + password + "@" + addr + "/0?no_such_option=1",
		"bad database":   "redis://app:" + password + "@" + addr + "/notadb",
		"other scheme":   "http://app:" + password + "@" + addr,
		"bad port":       "redis://app:" + password + "@127.0.0.1:%zz",
	}, store.ErrInvalidURL, password, "hunter2")
}

func TestCloseLeavesAGivenClientOpen(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client()
	s, err := New(c, Options{Namespace: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(testenv.Context(t)).Err(); err != nil {
		t.Fatalf("the caller's client stopped working after Store.Close: %v", err)
	}
}

func TestNewRejectsAClientThatIgnoresDeadlines(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := New(c, Options{}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("New with ContextTimeoutEnabled false = %v, want an error naming the option", err)
	}
}

// startCluster runs a one-node Redis Cluster that owns every slot. Cluster
// mode rejects a script whose keys span slots, so the suite passing on it
// shows that one namespace lives in one slot.
func startCluster(t *testing.T) *goredis.ClusterClient {
	t.Helper()
	srv := testenv.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	node := srv.Client()
	ctx := testenv.Context(t)
	slots := make([]int, 16384)
	for i := range slots {
		slots[i] = i
	}
	if err := node.ClusterAddSlots(ctx, slots...).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTS: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := node.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v\n%s", err, info)
		}
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConformanceOnCluster runs the suite through a ClusterClient, with
// LockKey pausing writes on the node: a renewal queued behind the pause must
// read the clock when it finally runs.
func TestConformanceOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran against the shared Redis")
	}
	c := startCluster(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			s, err := New(c, Options{Namespace: randomNamespace()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Advance: storetest.Sleep,
		Unit:    200 * time.Millisecond,
		LockKey: func(t *testing.T, s store.Store, _ string) func() {
			ctx := testenv.Context(t)
			// The pause's own timeout frees the node should the test die.
			if err := c.Do(ctx, "CLIENT", "PAUSE", "30000", "WRITE").Err(); err != nil {
				t.Fatalf("CLIENT PAUSE: %v", err)
			}
			return func() {
				if err := c.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
					t.Errorf("CLIENT UNPAUSE: %v", err)
				}
			}
		},
	})
}
