package chaos

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenure-dev/tenure/internal/harness/netproxy"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// networkedStores are the test servers of every store replicas reach
// through proxies.
var networkedStores = []struct {
	kind   string
	server testenv.Server
}{
	{kindPostgres, testenv.Postgres}, {kindMySQL, testenv.MySQL}, {kindRedis, testenv.Redis}, {kindEtcd, testenv.Etcd},
}

// viaProxies opens b as a replica would: through a proxy per endpoint.
func viaProxies(t *testing.T, b backend) (closingStore, netproxy.Group) {
	t.Helper()
	eps, err := b.endpoints()
	if err != nil {
		t.Fatal(err)
	}
	var ps netproxy.Group
	t.Cleanup(func() { ps.Close() })
	var addrs []string
	for _, ep := range eps {
		p, err := netproxy.New(ep)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		addrs = append(addrs, p.Addr())
	}
	rb, err := b.via(addrs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rb.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, ps
}

func scratchBackend(t *testing.T, raw string) backend {
	t.Helper()
	b, err := parseBackend(raw, testenv.UniqueName("chaos_test_"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.cleanup(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return b
}

func list(ctx context.Context, st store.Store, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := st.List(ctx, "")
	return err
}

// A partition cuts a replica off from every store: nothing it does
// reaches the server but through its proxies (etcd's client keeps its
// endpoints, for TLS, and dials them with the harness's dialer).
func TestReplicasReachEveryStoreOnlyThroughTheirProxies(t *testing.T) {
	for _, s := range networkedStores {
		t.Run(s.kind, func(t *testing.T) {
			b := scratchBackend(t, s.server.URL(t))
			st, ps := viaProxies(t, b)
			ctx := t.Context()
			if err := list(ctx, st, 2*time.Second); err != nil {
				t.Fatalf("through the proxy: %v", err)
			}
			ps.SetDown(true)
			for range 3 { // a fresh connection of a pool must not get round it either
				if err := list(ctx, st, 300*time.Millisecond); err == nil {
					t.Fatal("a call got through a partition of every proxy")
				}
			}
			ps.SetDown(false)
			deadline := time.Now().Add(10 * time.Second)
			for err := list(ctx, st, time.Second); err != nil; err = list(ctx, st, time.Second) {
				if time.Now().After(deadline) {
					t.Fatalf("the store is still unreachable after the partition healed: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// An etcd URL may list several members; the client keeps a connection to
// each, and each goes through a proxy of its own.
func TestAnEtcdReplicaDialsEveryEndpointThroughAProxyOfItsOwn(t *testing.T) {
	raw := testenv.Etcd.URL(t)
	first, _ := strings.CutPrefix(raw, "etcd://")
	host, rest, _ := strings.Cut(first, "/")
	if h, port, ok := strings.Cut(host, ":"); ok && h == "127.0.0.1" {
		raw = "etcd://localhost:" + port + "," + host + "/" + rest // two spellings of one member
	}
	b := scratchBackend(t, raw)
	st, ps := viaProxies(t, b)
	if len(ps) != 2 {
		t.Skipf("%s does not list two endpoints", store.RedactURL(raw))
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range ps {
		for {
			if err := list(t.Context(), st, time.Second); err != nil {
				t.Fatal(err)
			}
			if p.Conns() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nothing connected through the proxy for %s", p.Upstream())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestAnEtcdReplicaNeverDialsAnEndpointItHasNoProxyFor(t *testing.T) {
	b := scratchBackend(t, testenv.Etcd.URL(t))
	b.Via = map[string]string{"127.0.0.1:1": testenv.ClosedAddr(t)}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if st, err := b.open(ctx); err == nil {
		st.Close()
		t.Fatal("the replica reached etcd without a proxy")
	}
}

// TestSlowStoreCountsEachStoresRoundTrips pins roundTrips: the slowest
// call a replica makes in steady state (a renewal, a List, an acquisition
// refused because a peer holds the key) takes that many round trips, no
// more (the fault would time it out) and, for the slowest, no fewer (the
// fault would be milder than drawn).
func TestSlowStoreCountsEachStoresRoundTrips(t *testing.T) {
	const oneWay = 40 * time.Millisecond
	for _, s := range networkedStores {
		t.Run(s.kind, func(t *testing.T) {
			b := scratchBackend(t, s.server.URL(t))
			st, ps := viaProxies(t, b)
			ctx := t.Context()
			ttl, grace := 5*time.Second, time.Second
			e1 := testenv.MustAcquire(t, st, "k1", "o", ttl, grace)
			e2 := testenv.MustAcquire(t, st, "k2", "o", ttl, grace)
			items := []store.RenewItem{{Key: "k1", Epoch: e1, Running: true}, {Key: "k2", Epoch: e2, Running: true}}
			calls := map[string]func() error{
				"renewal": func() error { _, err := st.Renew(ctx, "o", ttl, items); return err },
				"list":    func() error { _, err := st.List(ctx, ""); return err },
				"refused acquisition": func() error {
					_, err := st.Acquire(ctx, store.AcquireRequest{Key: "k1", Owner: "p", TTL: ttl, Grace: grace})
					return err
				},
			}
			for _, call := range calls { // warm: statements prepared, sessions granted
				for range 2 {
					if err := call(); err != nil {
						t.Fatal(err)
					}
				}
			}
			ps.SetDelay(oneWay)
			slowest := 0.0
			for name, call := range calls {
				best := 1e9 // the fewest of three: a loaded machine only adds
				for range 3 {
					start := time.Now()
					if err := call(); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					best = min(best, float64(time.Since(start))/float64(2*oneWay))
				}
				t.Logf("%s: %.2f round trips", name, best)
				if best > float64(roundTrips[s.kind])+0.5 {
					t.Errorf("a %s takes %.2f round trips, more than the %d a slow store spreads a call's delay over",
						name, best, roundTrips[s.kind])
				}
				slowest = max(slowest, best)
			}
			if slowest < float64(roundTrips[s.kind])-0.5 {
				t.Errorf("the slowest steady call takes %.2f round trips, fewer than the %d counted", slowest, roundTrips[s.kind])
			}
		})
	}
}

// What the harness connects to directly (scratch tables, the fenced
// resource) is reached through the store's own reading of the URL, the
// password set apart: no password, however written, shows in an error.
func TestDirectConnectionsNeverShowAPassword(t *testing.T) {
	ctx := t.Context()
	for _, raw := range testenv.UnreachableURLs {
		for _, pw := range []string{"p@ss:w0rd", "tcp"} { // an early end, a word of messages
			for _, written := range testenv.Writings(pw) {
				if testenv.Misread(written) {
					continue
				}
				msgs := func(written string) string {
					b, err := parseBackend(strings.Replace(raw, "PW", written, 1), "chaos_x")
					if err != nil {
						return err.Error()
					}
					cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					var out []string
					for _, err := range []error{b.cleanup(cctx), prepareResource(cctx, newResourceSpec(b, "x", t.TempDir(), true)),
						dropResource(cctx, newResourceSpec(b, "x", t.TempDir(), true))} {
						if err != nil {
							out = append(out, err.Error())
						}
					}
					return strings.Join(out, "\n")
				}
				name := fmt.Sprintf("%s/%s", strings.SplitN(raw, ":", 2)[0], written)
				t.Run(name, func(t *testing.T) {
					t.Parallel() // each waits on a dial timeout
					msg, twin := msgs(written), msgs(testenv.Twin(written))
					if msg == "" {
						t.Fatal("no error from an unreachable store")
					}
					testenv.CheckHidesPassword(t, pw, written, msg, twin)
				})
			}
		}
	}
}

// A password that pgx would end at its first '@' still connects (the test
// server trusts local connections and ignores it): the harness's own pool
// gets it apart from the URL, as the store does.
func TestAPasswordWithAnAtSignReachesPostgresUnharmed(t *testing.T) {
	u := testenv.WithPassword(t, testenv.Postgres.URL(t), "postgres", "p@ss@word")
	b := scratchBackend(t, u.String())
	rs := newResourceSpec(b, strings.TrimPrefix(b.Scratch, "chaos_test_"), t.TempDir(), true)
	ctx := t.Context()
	if err := prepareResource(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := dropResource(ctx, rs); err != nil {
		t.Fatal(err)
	}
}

// The rewritten URL of a replica names the proxy and keeps the password
// exactly, however it was written.
func TestAProxiedURLKeepsItsPassword(t *testing.T) {
	for _, pw := range testenv.HardPasswords {
		for _, written := range testenv.Writings(pw) {
			if testenv.Misread(written) {
				continue
			}
			raw := "mysql://app:" + written + "@db.example:3306/ops?timeout=2s"
			got, err := withHost(raw, "127.0.0.1:4000")
			if err != nil {
				t.Errorf("%q: %v", written, err)
				continue
			}
			_, gotPW, err := store.SplitURLPassword(got)
			_, wantPW, _ := store.SplitURLPassword(raw)
			if err != nil || gotPW != wantPW || !strings.Contains(got, "@127.0.0.1:4000/ops?") {
				t.Errorf("%q: rewritten to %s (password %q, %v); want the proxy and password %q",
					written, store.RedactURL(got), gotPW, err, wantPW)
			}
		}
	}
}

// A PostgreSQL URL listing a primary and its standby gets a proxy per
// host, in the URL's order, and the rewritten URL reaches the proxies
// alone (pgx's fallback per TLS mode counted once).
func TestAPostgresHostListGetsAProxyPerHost(t *testing.T) {
	b, err := parseBackend("postgres://app:pw@db1:5432,db2:5433/ops?target_session_attrs=read-write", "chaos_check")
	if err != nil {
		t.Fatal(err)
	}
	eps, err := b.endpoints()
	if err != nil || !slices.Equal(eps, []string{"db1:5432", "db2:5433"}) {
		t.Fatalf("endpoints %v, %v; want db1:5432 then db2:5433", eps, err)
	}
	v, err := b.via([]string{"127.0.0.1:4001", "127.0.0.1:4002"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.URL, "@127.0.0.1:4001,127.0.0.1:4002/ops?") || v.Via["db2:5433"] != "127.0.0.1:4002" {
		t.Errorf("rewritten to %s, via %v", store.RedactURL(v.URL), v.Via)
	}
}

// A run's scratch table, namespace or prefix, and its resource tables or
// keys, are gone once it has cleaned up.
func TestCleanupLeavesNothingOfARunBehind(t *testing.T) {
	for _, s := range networkedStores {
		t.Run(s.kind, func(t *testing.T) {
			ctx := t.Context()
			b, err := parseBackend(s.server.URL(t), testenv.UniqueName("chaos_test_"))
			if err != nil {
				t.Fatal(err)
			}
			rs := newResourceSpec(b, strings.TrimPrefix(b.Scratch, "chaos_test_"), t.TempDir(), true)
			st, err := b.open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			epoch := testenv.MustAcquire(t, st, "k", "o", 5*time.Second, time.Second)
			if err := prepareResource(ctx, rs); err != nil {
				t.Fatal(err)
			}
			res, err := openResource(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			defer res.close()
			if w, err := res.write(ctx, "k", epoch, "o"); err != nil || !w.accepted {
				t.Fatalf("write: %+v, %v", w, err)
			}
			if err := errors.Join(b.cleanup(ctx), dropResource(ctx, rs)); err != nil {
				t.Fatal(err)
			}
			if left := leftovers(t, b, rs); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// leftovers names what is left of the run's scratch and resource.
func leftovers(t *testing.T, b backend, rs resourceSpec) []string {
	ctx := t.Context()
	var left []string
	switch b.Kind {
	case kindPostgres:
		pool, err := b.pgPool(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		// Anything named after the scratch table: its session table, the
		// function of its trigger.
		for _, name := range []string{b.Scratch, rs.Fence, rs.Table} {
			var n int
			err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_tables WHERE starts_with(tablename, $1))
	+ (SELECT count(*) FROM pg_proc WHERE starts_with(proname, $1))`, name).Scan(&n)
			if err != nil || n > 0 {
				left = append(left, fmt.Sprintf("%d objects named %s… (%v)", n, name, err))
			}
		}
	case kindMySQL:
		db, err := b.mysqlDB()
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// Any table named after the scratch table: its session table too.
		for _, name := range []string{b.Scratch, rs.Fence, rs.Table} {
			var n int
			err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND LEFT(table_name, CHAR_LENGTH(?)) = ?", name, name).Scan(&n)
			if err != nil || n > 0 {
				left = append(left, fmt.Sprintf("%d tables named %s… (%v)", n, name, err))
			}
		}
	case kindRedis:
		o, err := b.redisOptions()
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(o)
		defer c.Close()
		keys, _, err := c.Scan(ctx, 0, "{"+b.Scratch+"}:*", 1000).Result()
		if err != nil || len(keys) > 0 {
			left = append(left, fmt.Sprintf("keys %v (%v)", keys, err))
		}
	case kindEtcd:
		c, err := b.etcdClient()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, prefix := range []string{"/" + b.Scratch + "/", etcdResourcePrefix(rs)} {
			resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || resp.Count > 0 {
				left = append(left, fmt.Sprintf("prefix %s (%v)", prefix, err))
			}
		}
	}
	return left
}
