//go:build linux

package poolload

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/postgres"
	"github.com/tenure-dev/tenure/store/redis"
)

// server is a store's server for the whole report; each mode runs on a
// space of its own in it (space).
type server struct {
	name string // "postgres", "redis"
	url  string // what the workers open
	note string // where the figures come from, for the report
	// newSpace makes an empty table or namespace, removed when the test
	// (the mode's subtest) ends.
	newSpace func(t *testing.T) *space
}

// space is one mode's table or namespace, with the parent's own store on
// it (for List, never used inside the measured window) and the server's
// counters.
type space struct {
	name   string
	lister store.Store
	stats  func(ctx context.Context) (storeStats, error)
}

// storeStats is a reading of a server's cumulative counters and of the
// CPU time of its processes that serve this run, by pid.
type storeStats struct {
	at   time.Time
	vals map[string]float64
	cpu  map[int]time.Duration
}

// delta is what happened between two readings. A process that served
// the run and exited in between is missed; one that started counts whole.
func (b storeStats) delta(a storeStats) (vals map[string]float64, cpu time.Duration) {
	vals = make(map[string]float64, len(b.vals))
	for k, v := range b.vals {
		vals[k] = v - a.vals[k]
	}
	for pid, c := range b.cpu {
		cpu += c - a.cpu[pid]
	}
	return vals, cpu
}

func setupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), testenv.CallTimeout)
}

// postgresServer makes a scratch database on the test server (dropped
// when the test ends), so that pg_stat_database and the backends in
// pg_stat_activity are this run's alone even while other tests use the
// server; each mode then has a scratch table in it, dropped with
// Store.Drop.
func postgresServer(t *testing.T) *server {
	t.Helper()
	adminURL := testenv.Postgres.URL(t)
	ctx, cancel := setupCtx()
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL: "+err.Error())
	}
	defer admin.Close(context.Background())
	db := testenv.UniqueName("tenure_poolload_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		t.Fatalf("create a scratch database (the report needs CREATEDB): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := setupCtx()
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL)
		if err == nil {
			defer c.Close(context.Background())
			// FORCE ends connections a killed worker left behind.
			_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
		}
		if err != nil {
			t.Errorf("drop the scratch database %s: %v", db, err)
		}
	})
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	dbURL := u.String()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	// pg_stat_statements counts statements exactly, but only when the
	// server preloads it; otherwise transactions stand in for them.
	pss := false
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err == nil {
		_, err = conn.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1")
		pss = err == nil
	}
	note := "PostgreSQL: rows read = seq_tup_read + idx_tup_fetch of the lease and session tables (pg_stat_user_tables); " +
		"statements/s = xact_commit + xact_rollback of a scratch database (pg_stat_database; pg_stat_statements is not loaded, and a pgx batch is one transaction of several statements); " +
		"store CPU = utime + stime of the database's backends (/proc)"
	if pss {
		note = strings.Replace(note, "xact_commit + xact_rollback of a scratch database (pg_stat_database; pg_stat_statements is not loaded, and a pgx batch is one transaction of several statements)",
			"calls in pg_stat_statements of a scratch database", 1)
	}
	return &server{name: "postgres", url: dbURL, note: note, newSpace: func(t *testing.T) *space {
		t.Helper()
		table := testenv.UniqueName("poolload_")
		ctx, cancel := setupCtx()
		defer cancel()
		lister, err := postgres.Open(ctx, dbURL, postgres.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := setupCtx()
			defer cancel()
			if err := lister.Drop(ctx); err != nil {
				t.Errorf("drop table %s: %v", table, err)
			}
			_ = lister.Close()
		})
		// Created before the workers start, so they never race to.
		if err := lister.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return &space{name: table, lister: lister, stats: func(ctx context.Context) (storeStats, error) {
			return postgresStats(ctx, conn, table, pss)
		}}
	}}
}

func postgresStats(ctx context.Context, conn *pgx.Conn, table string, pss bool) (storeStats, error) {
	st := storeStats{at: time.Now(), vals: map[string]float64{}, cpu: map[int]time.Duration{}}
	var v [8]float64
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(seq_scan),0), coalesce(sum(seq_tup_read),0),
		coalesce(sum(idx_scan),0), coalesce(sum(idx_tup_fetch),0), coalesce(sum(n_tup_ins),0),
		coalesce(sum(n_tup_upd),0), coalesce(sum(n_tup_hot_upd),0), coalesce(sum(n_tup_del),0)
		FROM pg_stat_user_tables WHERE relname IN ($1, $2)`, table, table+":sessions").
		Scan(&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7])
	if err != nil {
		return st, fmt.Errorf("pg_stat_user_tables: %w", err)
	}
	for i, k := range []string{"seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del"} {
		st.vals[k] = v[i]
	}
	var d [6]float64
	err = conn.QueryRow(ctx, `SELECT xact_commit, xact_rollback, tup_returned, tup_fetched, blks_hit, blks_read
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&d[0], &d[1], &d[2], &d[3], &d[4], &d[5])
	if err != nil {
		return st, fmt.Errorf("pg_stat_database: %w", err)
	}
	for i, k := range []string{"xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "blks_hit", "blks_read"} {
		st.vals[k] = d[i]
	}
	if pss {
		var calls, rows float64
		err = conn.QueryRow(ctx, `SELECT coalesce(sum(calls),0), coalesce(sum(rows),0) FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&calls, &rows)
		if err != nil {
			return st, fmt.Errorf("pg_stat_statements: %w", err)
		}
		st.vals["pss_calls"], st.vals["pss_rows"] = calls, rows
	}
	// Every backend of the scratch database serves this run (autovacuum
	// workers included), but not this reading's own.
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return st, fmt.Errorf("pg_stat_activity: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return st, fmt.Errorf("pg_stat_activity: %w", err)
	}
	for _, pid := range pids {
		if c, ok := procCPU(int(pid)); ok {
			st.cpu[int(pid)] = c
		}
	}
	return st, nil
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times: 100
// on every architecture Go supports (getconf CLK_TCK).
const clockTick = 10 * time.Millisecond

// procCPU is pid's user + system time from /proc/PID/stat.
func procCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is the state, field 3 of stat
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// redisServer is a private redis-server for the report, started and
// killed by the test: INFO commandstats and used_cpu are a server's
// totals, which other tests on a shared server would swell. Set
// POOLLOAD_REDIS_URL to measure on a server of your own choosing instead
// (its figures then count every client).
func redisServer(t *testing.T) *server {
	t.Helper()
	rawURL, note := os.Getenv("POOLLOAD_REDIS_URL"), "Redis (a private redis-server started for the run"
	if rawURL == "" {
		rawURL = startRedis(t)
	} else {
		note = "Redis (" + store.RedactURL(rawURL) + ", shared: its figures count every client"
	}
	note += "): commands/s from INFO commandstats, every command including those run inside scripts (the parent's INFO excluded); statements/s = the commands clients sent (EVALSHA, EVAL, PING, SUBSCRIBE, …), store CPU = used_cpu_user + used_cpu_sys"
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	ctx, cancel := setupCtx()
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis: "+err.Error())
	}
	return &server{name: "redis", url: rawURL, note: note, newSpace: func(t *testing.T) *space {
		t.Helper()
		ns := testenv.UniqueName("poolload_")
		ctx, cancel := setupCtx()
		defer cancel()
		lister, err := redis.Open(ctx, rawURL, redis.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = lister.Close()
			ctx, cancel := setupCtx()
			defer cancel()
			// The namespace's keys, from store/redis's documentation.
			tag := "{" + ns + "}"
			if err := client.Del(ctx, tag+":leases", tag+":keys", tag+":sessions").Err(); err != nil {
				t.Errorf("drop namespace %s: %v", ns, err)
			}
		})
		return &space{name: ns, lister: lister, stats: func(ctx context.Context) (storeStats, error) {
			return redisStats(ctx, client)
		}}
	}}
}

// clientCommand reports whether cmd (as INFO commandstats names it) is
// one a client sends rather than one a script calls: commandstats counts
// both, so the commands inside each EVALSHA appear under their own names.
// Every store operation is one script; the rest is the client's own
// traffic (PING, SUBSCRIBE, CLIENT SETINFO, SCRIPT LOAD, …).
func clientCommand(cmd string) bool {
	for _, p := range []string{"eval", "fcall", "ping", "hello", "select", "auth", "subscribe", "psubscribe",
		"unsubscribe", "punsubscribe", "client|", "script|", "readonly", "quit", "cluster|"} {
		if strings.HasPrefix(cmd, p) {
			return true
		}
	}
	return false
}

// startRedis starts a private redis-server that saves nothing, killed
// when the test ends and, like the workers, when the parent dies
// (Pdeathsig; testenv.StartRedis's server would outlive a killed parent).
// It returns its URL.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server not found on PATH; install Redis or set POOLLOAD_REDIS_URL")
	}
	addr := testenv.ClosedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return "redis://" + addr + "/0"
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", addr, err)
		}
	}
}

// redisStats reads INFO commandstats (calls.CMD, usec.CMD, their totals
// calls and usec, and requests: the calls clients sent) and INFO cpu.
func redisStats(ctx context.Context, c *goredis.Client) (storeStats, error) {
	st := storeStats{at: time.Now(), vals: map[string]float64{}, cpu: map[int]time.Duration{}}
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return st, fmt.Errorf("INFO: %w", err)
	}
	var cpu float64
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			cmd := strings.TrimPrefix(k, "cmdstat_")
			if cmd == "info" {
				continue // the parent's readings
			}
			for field := range strings.SplitSeq(v, ",") {
				name, num, _ := strings.Cut(field, "=")
				if name != "calls" && name != "usec" {
					continue
				}
				f, _ := strconv.ParseFloat(num, 64)
				st.vals[name+"."+cmd] += f
				st.vals[name] += f
				if name == "calls" && clientCommand(cmd) {
					st.vals["requests"] += f
				}
			}
		}
	}
	st.cpu[0] = time.Duration(cpu * float64(time.Second))
	return st, nil
}
