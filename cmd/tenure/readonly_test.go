package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// lookingCommands are the commands that must never create a store, with
// url as their store: status only reads, and release writes only to revoke
// a live lease, which a store that does not exist has none of.
func lookingCommands(url string) [][]string {
	return [][]string{
		{"status", "--store", url},
		{"status", "--json", "--store", url},
		{"release", "--key", "k", "--yes", "--store", url},
		{"status", "--store", url}, // still none: the calls before made none
	}
}

func TestStatusAndReleaseNeverCreateAnSQLiteStore(t *testing.T) {
	t.Parallel()
	dir, state := t.TempDir(), t.TempDir()
	typo := filepath.Join(dir, "typo", "path.db")
	for _, args := range lookingCommands("sqlite:" + typo) {
		_, stderr, code := runTenure(t, nil, args...)
		oneLineError(t, stderr, code, 3, "no store at "+typo+": nothing has run against it")
	}
	// Nor the default store, when none is named.
	_, stderr, code := runTenure(t, []string{"TENURE_STORE=", "XDG_STATE_HOME=" + state}, "status")
	oneLineError(t, stderr, code, 3, "no store at "+filepath.Join(state, "tenure", "tenure.db"))
	for _, d := range []string{dir, state} {
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("%s holds %v: a looking command created it", d, entries)
		}
	}

	// An existing file is read, but not a table it does not hold.
	real := "sqlite:" + filepath.Join(dir, "real.db")
	if _, stderr, code := runTenure(t, nil, "run", "--once", "--key", "k", "--store", real, "--", "true"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	if stdout, stderr, code := runTenure(t, nil, "status", "--store", real); code != 0 || !strings.Contains(stdout, "released") {
		t.Errorf("status of an existing store: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, args := range lookingCommands(real + "?table=other") {
		_, stderr, code := runTenure(t, nil, args...)
		oneLineError(t, stderr, code, 3, "no lease table other in this file")
	}
}

func TestStatusAndReleaseNeverCreateALeaseTable(t *testing.T) {
	t.Parallel()
	for name, server := range map[string]testenv.Server{"postgres": testenv.Postgres, "mysql": testenv.MySQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			base := server.URL(t)
			table := testenv.UniqueName("cli_absent_")
			if name == "postgres" {
				t.Cleanup(func() { dropTable(t, base, table) }) // were one made after all
			}
			sep := "?"
			if strings.Contains(base, "?") {
				sep = "&"
			}
			for _, args := range lookingCommands(base + sep + "table=" + table) {
				_, stderr, code := runTenure(t, nil, args...)
				oneLineError(t, stderr, code, 3, "no lease table "+table+" in this database")
			}
		})
	}
}

func TestStatusWritesNothingToRedisOrEtcd(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		base := testenv.Redis.URL(t)
		ns := testenv.UniqueName("cli_absent_")
		t.Cleanup(func() { deleteNamespace(t, base, ns) })
		checkLookingCommandsFindNoLeases(t, base+"?namespace="+ns)
		opts, err := goredis.ParseURL(base)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		keys, _, err := c.Scan(t.Context(), 0, "{"+ns+"}*", 100).Result()
		if err != nil || len(keys) != 0 {
			t.Errorf("the namespace holds %q (%v) after status and release", keys, err)
		}
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		base := testenv.Etcd.URL(t)
		prefix := testenv.UniqueName("cli_absent_")
		checkLookingCommandsFindNoLeases(t, base+"?prefix="+prefix)
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{strings.TrimPrefix(base, "etcd://")}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		resp, err := c.Get(ctx, "/"+prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Errorf("the prefix holds keys after status and release: %v, %v", resp, err)
		}
	})
}

// checkLookingCommandsFindNoLeases runs the looking commands on a store
// with nothing to create, and nothing in it.
func checkLookingCommandsFindNoLeases(t *testing.T, url string) {
	t.Helper()
	for _, args := range lookingCommands(url) {
		stdout, stderr, code := runTenure(t, nil, args...)
		empty := strings.Contains(stdout, "no leases") || strings.Contains(stdout, "no live lease") || strings.TrimSpace(stdout) == "[]"
		if code != 0 || !empty {
			t.Errorf("tenure %s: exit %d\n%s%s", args[0], code, stdout, stderr)
		}
	}
}
