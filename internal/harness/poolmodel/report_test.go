package poolmodel

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// TestMillionKeysReport prints the 1,000,000-key, 100-worker tables of
// BENCHMARKS.md. It takes several minutes and gigabytes, so it runs only
// when asked for:
//
//	go test ./internal/harness/poolmodel -run TestMillionKeysReport -v -timeout 60m
//
// POOLMODEL_KEYS, POOLMODEL_WORKERS and POOLMODEL_BATCH change the size
// and the rolling restart's batch (default 10 workers at a time).
func TestMillionKeysReport(t *testing.T) {
	testenv.ReportOnly(t)
	su := Setup{Config: Config{Keys: testenv.PositiveInt(t, "POOLMODEL_KEYS", 1_000_000), Seed: 1},
		Workers: testenv.PositiveInt(t, "POOLMODEL_WORKERS", 100), RestartBatch: testenv.PositiveInt(t, "POOLMODEL_BATCH", 10)}
	start := time.Now()
	rows, err := Timeline(su)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys, %d workers, seed %d, in %v:\n%s", su.Keys, su.Workers, su.Seed, time.Since(start).Round(time.Second), Table(rows))
}
