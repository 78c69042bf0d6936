package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/internal/harness/netproxy"
)

// Commit is how a PostgreSQL primary waits for its standby before it
// acknowledges a commit: synchronous_commit with the standby named in
// synchronous_standby_names, or no standby named for Async.
type Commit string

// The settings a PostgresPair can run with.
const (
	Off         Commit = "off"          // synchronous_commit off: not even the primary's own WAL is waited for
	Async       Commit = "async"        // synchronous_commit on, no synchronous standby
	SyncOn      Commit = "on"           // the standby has flushed the commit's WAL
	RemoteApply Commit = "remote_apply" // the standby has applied it
)

// PostgresPair is a private PostgreSQL primary with a streaming standby:
// two clusters of the machine's PostgreSQL binaries, each its own
// postmaster, port and data directory, so a test can kill the primary
// and promote the standby. The machine's shared server is never touched.
type PostgresPair struct {
	t      testing.TB
	bin    string
	runAs  []string // runuser prefix when the test runs as root
	dir    string
	commit Commit

	mu      sync.Mutex
	nodes   [2]*pgNode
	primary int // index of the primary in nodes
	// links stand in for each node on the replication link, so a test
	// can add latency to it (SetReplicationDelay).
	links [2]*netproxy.Proxy
}

type pgNode struct {
	name string
	port int
	data string
	up   bool
}

// StartPostgresPair starts a primary and a standby streaming from it. It
// skips (fails under CI=true) without PostgreSQL's server binaries.
func StartPostgresPair(t testing.TB, commit Commit) *PostgresPair {
	t.Helper()
	bin := postgresBinDir()
	if bin == "" {
		Unavailable(t, "PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup) not found; install postgresql")
	}
	p := &PostgresPair{t: t, bin: bin, commit: commit}
	dir, err := os.MkdirTemp("", "tenure-pgpair-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(p.stop)
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			Unavailable(t, "running as root and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.runAs = []string{"runuser", "-u", "postgres", "--"}
	}
	for i := range p.nodes {
		port, err := strconv.Atoi(strings.TrimPrefix(ClosedAddr(t), "127.0.0.1:"))
		if err != nil {
			t.Fatal(err)
		}
		p.nodes[i] = &pgNode{name: fmt.Sprintf("n%d", i), port: port, data: filepath.Join(dir, fmt.Sprintf("n%d", i))}
		if p.links[i], err = netproxy.New(fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			t.Fatal(err)
		}
	}
	prim := p.nodes[0]
	if err := p.run("initdb", "-D", prim.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	standbys := "''"
	if commit == SyncOn || commit == RemoteApply {
		standbys = "'standby'"
	}
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
wal_level = replica
max_wal_senders = 4
hot_standby = on
fsync = off
synchronous_commit = '%s'
synchronous_standby_names = %s
`, dir, map[Commit]string{Off: "off", Async: "on", SyncOn: "on", RemoteApply: "remote_apply"}[commit], standbys)
	if err := p.appendConf(prim, conf); err != nil {
		t.Fatal(err)
	}
	if err := p.start(prim); err != nil {
		t.Fatal(err)
	}
	if err := p.addStandby(p.nodes[1], prim); err != nil {
		t.Fatal(err)
	}
	return p
}

// postgresBinDir finds the newest PostgreSQL server binaries: on PATH, or
// where Debian puts them.
func postgresBinDir() string {
	if path, err := exec.LookPath("pg_ctl"); err == nil {
		// Follow a link to where its siblings are.
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		dir := filepath.Dir(path)
		if _, err := os.Stat(filepath.Join(dir, "pg_basebackup")); err == nil {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_basebackup")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

// URL lists both servers; target_session_attrs=read-write makes a client
// connect to whichever is the primary.
func (p *PostgresPair) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?target_session_attrs=read-write&connect_timeout=2",
		p.nodes[0].port, p.nodes[1].port)
}

// PrimaryURL is the URL of the primary alone.
func (p *PostgresPair) PrimaryURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=2", p.nodes[p.primary].port)
}

// Failover kills the primary with every process of it at once, and cuts
// its replication link first, as a crash of its host would, then promotes
// the standby. The old primary stays down
// until Rejoin.
func (p *PostgresPair) Failover() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, standby := p.nodes[p.primary], p.nodes[1-p.primary]
	if !standby.up {
		return fmt.Errorf("postgres pair: no standby to promote (Rejoin first)")
	}
	// The primary's host fails: what it had not yet delivered to the
	// standby (queued on a slow link, say) never arrives.
	link := p.links[p.primary]
	link.SetDown(true)
	err := killCluster(old.data)
	link.SetDown(false) // closes the connections that lived through it
	if err != nil {
		return err
	}
	old.up = false
	if err := p.run("pg_ctl", "promote", "-w", "-t", "30", "-D", standby.data); err != nil {
		return err
	}
	p.primary = 1 - p.primary
	return nil
}

// SetReplicationDelay delays what crosses the replication link by d in
// each direction: the standby receives WAL d later, and a synchronous
// commit waits 2d longer for its answer.
func (p *PostgresPair) SetReplicationDelay(d time.Duration) {
	for _, l := range p.links {
		l.SetDelay(d)
	}
}

// CaughtUp returns once the standby has replayed everything the primary
// had written when it was called, so that what a test set up before holding
// replication is on both.
func (p *PostgresPair) CaughtUp(ctx context.Context) error {
	p.mu.Lock()
	prim, standby := p.nodes[p.primary], p.nodes[1-p.primary]
	p.mu.Unlock()
	connect := func(port int) (*pgx.Conn, error) {
		return pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=2", port))
	}
	pc, err := connect(prim.port)
	if err != nil {
		return err
	}
	defer pc.Close(ctx)
	var lsn string
	if err := pc.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	sc, err := connect(standby.port)
	if err != nil {
		return err
	}
	defer sc.Close(ctx)
	for {
		var done bool
		if err := sc.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres pair: the standby has not replayed %s: %w", lsn, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// HoldReplication stops the primary's WAL sender (SIGSTOP), so that what
// the primary commits from now on never leaves it: with Async commits, a
// Failover then loses it, as a crash under replication lag would. (With
// synchronous commits, the primary's commits wait.) Stopping the standby's
// receiver would not do: what was sent waits in its socket.
func (p *PostgresPair) HoldReplication() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	prim := p.nodes[p.primary]
	pid, err := postmasterPid(prim.data)
	if err != nil {
		return err
	}
	held := 0
	for _, c := range children(pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if strings.Contains(string(cmdline), "walsender") {
			if err := syscall.Kill(c, syscall.SIGSTOP); err != nil {
				return err
			}
			held++
		}
	}
	if held == 0 {
		return fmt.Errorf("postgres pair: the primary on :%d has no WAL sender", prim.port)
	}
	return nil
}

// Rejoin makes the killed old primary a standby of the new one, from a
// fresh base backup.
func (p *PostgresPair) Rejoin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.nodes[1-p.primary]
	if old.up {
		return nil
	}
	if err := os.RemoveAll(old.data); err != nil {
		return err
	}
	return p.addStandby(old, p.nodes[p.primary])
}

// addStandby makes n a streaming standby of prim and waits until prim
// sees it streaming (and, when commits wait for it, as synchronous).
func (p *PostgresPair) addStandby(n, prim *pgNode) error {
	if err := p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(prim.port), "-U", "postgres",
		"-D", n.data, "-R", "-X", "stream", "--no-sync"); err != nil {
		return err
	}
	// pg_basebackup -R wrote primary_conninfo into postgresql.auto.conf;
	// a later line there wins, with a name the primary's
	// synchronous_standby_names knows.
	extra := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%s user=postgres application_name=standby'\n",
		strings.TrimPrefix(p.links[slices.Index(p.nodes[:], prim)].Addr(), "127.0.0.1:"))
	if err := appendFile(filepath.Join(n.data, "postgresql.auto.conf"), extra); err != nil {
		return err
	}
	if err := p.start(n); err != nil {
		return err
	}
	want := "async"
	if p.commit == SyncOn || p.commit == RemoteApply {
		want = "sync"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var state string
		err := queryOnce(ctx, prim.port, `SELECT COALESCE(max(sync_state), '') FROM pg_stat_replication WHERE state = 'streaming'`, &state)
		if err == nil && state == want {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("postgres pair: standby on :%d not streaming as %s within 30s (state %q, %v)", n.port, want, state, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func queryOnce(ctx context.Context, port int, sql string, dst any) error {
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=2", port))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql).Scan(dst)
}

// start starts n on its port. The port was free when the pair chose it,
// seconds ago (initdb, a base backup); should something have bound it
// since, n moves to another port, and its link with it (onFreePort).
func (p *PostgresPair) start(n *pgNode) error {
	return onFreePort(func() error {
		if err := p.appendConf(n, fmt.Sprintf("port = %d\n", n.port)); err != nil {
			return err
		}
		if err := p.run("pg_ctl", "start", "-w", "-t", "60", "-D", n.data, "-l", n.data+".log"); err != nil {
			// pg_ctl says only "Examine the log output", which the test's
			// temporary directory takes with it.
			return fmt.Errorf("%w\n%s's server log ends:\n%s", err, n.name, logTail(n.data+".log", 20))
		}
		n.up = true
		return nil
	}, func() error {
		port, err := pickPort()
		if err != nil {
			return err
		}
		n.port = port
		p.links[slices.Index(p.nodes[:], n)].SetUpstream("127.0.0.1:" + strconv.Itoa(n.port))
		return nil
	})
}

// logTail returns the last lines of the file at path, or why it cannot.
func logTail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func (p *PostgresPair) appendConf(n *pgNode, text string) error {
	return appendFile(filepath.Join(n.data, "postgresql.conf"), text)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// run runs one of the PostgreSQL binaries, as postgres when root.
func (p *PostgresPair) run(name string, args ...string) error {
	argv := append(slices.Clone(p.runAs), append([]string{filepath.Join(p.bin, name)}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = p.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, out)
	}
	return nil
}

func (p *PostgresPair) stop() {
	for _, n := range p.nodes {
		if n != nil && n.up {
			_ = killCluster(n.data)
		}
	}
	for _, l := range p.links {
		if l != nil {
			l.Close()
		}
	}
	_ = os.RemoveAll(p.dir)
}

// killCluster stops the postmaster of data and every process it forked,
// then kills them all, so none of them sends or writes anything more.
func killCluster(data string) error {
	pid, err := postmasterPid(data)
	if err != nil {
		return err
	}
	_ = syscall.Kill(pid, syscall.SIGSTOP) // no more forks
	procs := append(children(pid), pid)
	for _, c := range procs {
		_ = syscall.Kill(c, syscall.SIGSTOP)
	}
	for _, c := range procs {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func postmasterPid(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("postgres pair: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("postgres pair: postmaster.pid: %w", err)
	}
	return pid, nil
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, ok := procStat(c); ok && len(f) >= 2 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}
