package tenure_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// TestOneRefusedRoundNeverEndsRunHoweverManyKeys: refusals are counted
// in rounds, not calls. An acquisition pass makes a call per key, so when
// calls were counted a replica with a dozen keys gave up after one refused
// round — a grant that lands a moment after the replica starts would end
// every replica at once. Here only the first round is refused.
func TestOneRefusedRoundNeverEndsRunHoweverManyKeys(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var deny atomic.Bool
		deny.Store(true)
		st.SetFault(func(string) error {
			if deny.Load() {
				return store.Denied(errors.New("permission denied for table tenure_leases (SQLSTATE 42501)"))
			}
			return nil
		})
		r := newReplica(t, st, "a")
		var want []string
		for i := range 12 {
			key := fmt.Sprintf("job-%02d", i)
			want = append(want, key)
			if err := r.Set(key, tenure.Job{Runner: r.rec.runner(key)}); err != nil {
				t.Fatal(err)
			}
		}
		r.start() // one round, every call refused
		deny.Store(false)
		advance(3 * renew)
		select {
		case err := <-r.done:
			t.Fatalf("Run returned %v after one refused round of under a second; the store answers again", err)
		default:
		}
		wantRunning(t, "a once the store answers", r, want...)
		if err := r.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// TestRunAfterGivingUpStartsOverOnceTheStoreAnswers: Run may be called
// again once it returned (an application that retries after an operator
// fixed the grants); the count of refused rounds starts over, so it runs.
func TestRunAfterGivingUpStartsOverOnceTheStoreAnswers(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		denyAll(st)
		r := newReplica(t, st, "a").channels(t).start()
		advance(20 * renew)
		select {
		case err := <-r.done:
			if !errors.Is(err, tenure.ErrStoreRefused) {
				t.Fatalf("first Run: %v, want ErrStoreRefused", err)
			}
		default:
			t.Fatal("first Run did not give up")
		}
		var calls atomic.Int64 // the operator granted the rights
		st.SetFault(func(string) error { calls.Add(1); return nil })
		r.start()
		advance(2 * renew)
		select {
		case err := <-r.done:
			t.Fatalf("second Run, on a store that answers, returned %v after %d store calls", err, calls.Load())
		default:
		}
		wantRunning(t, "a after the grant", r, "telegram", "discord", "github")
		if err := r.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}
