package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// These runs fail a replicated store over while replicas run; see
// restart_test.go for the Redis and etcd ones.

// TestChaosPostgresStandby runs replicas against a PostgreSQL primary with
// an asynchronous streaming standby, every replica given both hosts
// (target_session_attrs=read-write) through proxies of its own, and fails
// the primary over again and again: the standby falls behind (its WAL
// stream held for half the fault's drawn downtime, 0.25-2 s), the
// primary's host dies with its replication link, the standby is promoted
// lacking what the primary acknowledged meanwhile, and the old primary
// comes back as the new one's standby from a fresh base backup. Replicas
// are killed and restarted meanwhile. The store's promotion check
// (store/postgres/promotion.go) must keep every invariant anyway; without
// it, a lost acquisition is granted again at once.
func TestChaosPostgresStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("runs replicas under faults for tens of seconds")
	}
	pair := testenv.StartPostgresPair(t, testenv.Async)
	quarantine := DefaultTiming().TTL + DefaultTiming().Grace
	failover := func(ctx context.Context, down time.Duration) error {
		if err := pair.HoldReplication(); err != nil {
			return err
		}
		if err := sleepCtx(ctx, down/2); err != nil {
			return err
		}
		if err := pair.Failover(); err != nil {
			return err
		}
		// The fault lasts while no term may be granted, at least.
		_ = sleepCtx(ctx, max(down, quarantine)) // a cancelled run still rejoins
		return pair.Rejoin()
	}
	rep := runChaosWith(t, pair.URL(), 30*time.Second, func(o *Options) {
		o.RestartStore = failover
		o.Faults = []string{FaultStoreRestart, FaultKill, FaultRestart}
	})
	if rep != nil && rep.Faults[FaultStoreRestart] < 1 {
		t.Errorf("no failover")
	}
}
