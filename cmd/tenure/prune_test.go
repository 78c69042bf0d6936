package main_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"
)

func TestPruneDeletesOldRecordsAndEpochsStillGrowOnSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "leases.db")
	testPrune(t, "sqlite:"+path, func(ctx context.Context, key string) error {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, `UPDATE tenure_leases SET expires_at = expires_at - 7200000000 WHERE key = ?`, key)
		return err
	})
}

func TestPruneDeletesOldRecordsAndEpochsStillGrowOnPostgres(t *testing.T) {
	t.Parallel()
	url := postgresTable(t, "cli_prune")
	base, table, _ := strings.Cut(url, "table=")
	testPrune(t, url, func(ctx context.Context, key string) error {
		conn, err := pgx.Connect(ctx, strings.TrimRight(base, "?&"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `UPDATE `+pgx.Identifier{table}.Sanitize()+` SET expires_at = expires_at - interval '2 hours' WHERE key = $1`, key)
		return err
	})
}

// testPrune runs a job once, makes its record two hours old with age (a
// store clock cannot be moved), and prunes: the old record goes, a pause
// record and a fresh one stay, and the job's next run gets a higher epoch.
func testPrune(t *testing.T, url string, age func(ctx context.Context, key string) error) {
	for _, key := range []string{"old-job", "new-job"} {
		if _, stderr, code := runTenure(t, nil, "run", "--once", "--key", key, "--store", url, "--", "true"); code != 0 {
			t.Fatalf("run --once %s: exit %d: %s", key, code, stderr)
		}
	}
	if _, stderr, code := runTenure(t, nil, "pause", "--key", "paused-job", "--store", url); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, stderr)
	}
	before := epochs(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := age(ctx, "old-job"); err != nil {
		t.Fatalf("age the record: %v", err)
	}

	if _, stderr, code := runTenure(t, nil, "prune", "--older-than", "30m", "--store", url); code != 2 || !strings.Contains(stderr, "under 1h") {
		t.Errorf("prune --older-than 30m: exit %d %q, want a usage error", code, stderr)
	}
	stdout, stderr, code := runTenure(t, nil, "prune", "--older-than", "1h", "--store", url)
	if code != 0 || !strings.Contains(stdout, "pruned 1 record of every key") {
		t.Fatalf("prune: exit %d %q %q, want 1 record pruned", code, stdout, stderr)
	}
	after := epochs(t, url)
	if _, ok := after["old-job"]; ok {
		t.Errorf("old-job is still listed after the prune: %v", after)
	}
	for _, key := range []string{"new-job", "paused-job~paused"} {
		if after[key] != before[key] {
			t.Errorf("%s: epoch %d after the prune, want it kept at %d", key, after[key], before[key])
		}
	}

	if _, stderr, code := runTenure(t, nil, "run", "--once", "--key", "old-job", "--store", url, "--", "true"); code != 0 {
		t.Fatalf("run --once old-job after the prune: exit %d: %s", code, stderr)
	}
	if e := epochs(t, url)["old-job"]; e <= before["old-job"] {
		t.Errorf("old-job ran again after its record was pruned with epoch %d, want > %d", e, before["old-job"])
	}
}

// epochs reads every key's epoch with tenure status --json.
func epochs(t *testing.T, url string) map[string]int64 {
	t.Helper()
	stdout, stderr, code := runTenure(t, nil, "status", "--json", "--store", url)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	var rows []struct {
		Key   string `json:"key"`
		Epoch int64  `json:"epoch"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("status --json printed %q: %v", stdout, err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		out[r.Key] = r.Epoch
	}
	return out
}
