package postgres

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// openWith opens a store on table with extra URL settings.
func openWith(t *testing.T, table, settings string) *Store {
	t.Helper()
	u, err := url.Parse(testenv.Postgres.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	params := "table=" + table
	if settings != "" {
		params += "&" + settings
	}
	if u.RawQuery != "" {
		params = "&" + params
	}
	u.RawQuery += params
	s, err := Open(testenv.Context(t), u.String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Drop(context.Background()); s.Close() })
	return s
}

// prunedKeyReacquired gives key epoch old through s (three terms), releases
// it, then lets an Acquire of key through s begin while a Prune through p
// that deletes key holds its table lock: a row lock held by a test
// transaction keeps the prune's DELETE waiting for ~80ms, under its 200ms
// lock_timeout. s has one connection, so its acquire statement is already
// prepared there (as on any replica after its first round). It reports the
// epoch the Acquire got and whether the interleaving happened (the prune
// deleted key).
func prunedKeyReacquired(t *testing.T, s, p *Store, key string) (old, got int64, raced bool) {
	ctx := testenv.Context(t)
	for range 3 {
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "a", TTL: time.Second})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire: %+v %v", res, err)
		}
		old = res.Epoch
		if err := s.Release(ctx, "a", []store.Term{{Key: key, Epoch: res.Epoch}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // older than the prune's 1ms

	unlock := lockKey(t, p, key)
	pruned := make(chan int, 1)
	go func() {
		n, err := p.Prune(ctx, "", time.Millisecond)
		if err != nil {
			t.Errorf("Prune: %v", err)
		}
		pruned <- n
	}()
	time.Sleep(40 * time.Millisecond) // the prune holds the table lock; its DELETE waits on key
	acquired := make(chan store.AcquireResult, 1)
	go func() {
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "b", TTL: time.Second})
		if err != nil {
			t.Errorf("Acquire during the prune: %v", err)
		}
		acquired <- res
	}()
	time.Sleep(40 * time.Millisecond) // the Acquire waits behind the table lock
	unlock()
	n := <-pruned
	res := <-acquired
	if !res.Acquired {
		t.Fatalf("Acquire refused: %+v", res.Holder)
	}
	return old, res.Epoch, n == 1
}

// checkPruneRace races a prune and an acquisition of the same key until
// the acquisition waited for the prune, on a replica whose connections
// have settings.
func checkPruneRace(t *testing.T, settings string) {
	table := testenv.UniqueName("prune_race_")
	s := openWith(t, table, "pool_max_conns=1"+settings)
	p := openWith(t, table, "")
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		old, got, raced := prunedKeyReacquired(t, s, p, key)
		if !raced {
			continue // the acquisition ran before the prune: try again
		}
		if got <= old {
			t.Fatalf("%s acquired while a prune deleted it: epoch %d, want > %d (its last epoch); the acquire statement read the epoch floor from before the prune", key, got, old)
		}
		return
	}
	t.Skip("the acquisition never waited for the prune")
}

// TestAPrunedKeyStartsAboveItsOldEpochsUnderEveryIsolationLevel races an
// acquisition of a key against the prune that deletes it, with the
// replica's connections defaulting to each isolation level (set on the
// database or role, in a caller's pool, or as ?default_transaction_isolation=
// in the URL). Under REPEATABLE READ and SERIALIZABLE a prepared
// statement's snapshot is taken at Bind, before it waits for the prune's
// table lock; before Acquire asked for READ COMMITTED itself, the INSERT
// read the floor from before the prune and gave the key epoch 1 again.
func TestAPrunedKeyStartsAboveItsOldEpochsUnderEveryIsolationLevel(t *testing.T) {
	for name, settings := range map[string]string{
		"read committed":  "",
		"repeatable read": "&default_transaction_isolation=repeatable%20read",
		"serializable":    "&default_transaction_isolation=serializable",
	} {
		t.Run(name, func(t *testing.T) { checkPruneRace(t, settings) })
	}
}
