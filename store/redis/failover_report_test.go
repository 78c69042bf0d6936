package redis

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// TestFailoverLossReport kills the primary while one writer acquires a new
// key and renews one lease as fast as the primary answers, promotes the
// replica, and counts what the new primary lacks of what was acknowledged:
// its replication is asynchronous, so the tail of the stream that had not
// crossed the link is lost. The link gets no added latency, then 5 ms each
// way. TENURE_FAILOVERS sets the failovers per setting (1 here; SAFETY.md's
// figures come from 20):
//
//	TENURE_FAILOVERS=20 go test ./store/redis -run TestFailoverLossReport -v
func TestFailoverLossReport(t *testing.T) {
	runs := 1
	if v := os.Getenv("TENURE_FAILOVERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TENURE_FAILOVERS=%q: want a count", v)
		}
		runs = n
	}
	for _, lag := range []time.Duration{0, 5 * time.Millisecond} {
		lost, most, worst := 0, 0, time.Duration(0)
		for range runs {
			commits, window := measureRedisFailover(t, lag)
			if commits > 0 {
				lost++
			}
			most, worst = max(most, commits), max(worst, window)
		}
		t.Logf("link +%-5v %d failovers, %d lost acknowledged writes; at most %d writes, spanning %v",
			lag, runs, lost, most, worst.Round(time.Microsecond))
	}
}

// measureRedisFailover runs one failover of a fresh pair and returns how
// many acknowledged writes the promoted replica lacks, and the time from
// the last acknowledgement it kept to the last one given.
func measureRedisFailover(t *testing.T, lag time.Duration) (int, time.Duration) {
	t.Helper()
	primary := testenv.StartRedis(t)
	replica, link := replicaOf(t, primary)
	link.SetDelay(lag)
	ctx := testenv.Context(t)
	ns := randomNamespace()
	s, err := Open(ctx, "redis://"+primary.Addr()+"/0", Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const ttl, grace = time.Minute, time.Second
	renewed := testenv.MustAcquire(t, s, "r", "w", ttl, grace)

	writes := testenv.StartWrites(s, "w", renewed, ttl, grace)
	time.Sleep(time.Duration(200+rand.IntN(300)) * time.Millisecond)
	link.SetDown(true) // the primary's host fails: what it had not delivered never arrives
	primary.Kill()
	writes.Wait()
	link.SetDown(false)
	c := replica.Client()
	if err := c.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	keys, err := c.ZRangeArgs(ctx, goredis.ZRangeArgs{Key: s.keys[1], Start: "[k", Stop: "[l", ByLex: true}).Result()
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	if len(keys) > 0 {
		kept, _ = strconv.Atoi(keys[len(keys)-1][1:])
	}
	return writes.LostTail(kept)
}
