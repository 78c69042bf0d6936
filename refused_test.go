package tenure_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// denyAll makes every call of st fail as a store without the rights would
// (a role without grants, a schema it may not create in), and counts them.
func denyAll(st *memstore.Store) *atomic.Int64 {
	var calls atomic.Int64
	st.SetFault(func(string) error {
		calls.Add(1)
		return store.Denied(errors.New("permission denied for schema public (SQLSTATE 42501)"))
	})
	return &calls
}

// TestRunGivesUpWhenTheStoreKeepsRefusingAccess: a replica whose store
// refuses its rights ends Run with ErrStoreRefused after MaxRefused rounds
// instead of warning forever; the error carries the store's reason.
func TestRunGivesUpWhenTheStoreKeepsRefusingAccess(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		calls := denyAll(st)
		r := newReplica(t, st, "a").channels(t).start()
		began := time.Now()
		var err error
		select {
		case err = <-r.done:
		case <-time.After(time.Hour):
			r.cancel()
			t.Fatalf("Run still running an hour into a store that refuses every call (%d calls)", calls.Load())
		}
		if !errors.Is(err, tenure.ErrStoreRefused) || !errors.Is(err, store.ErrDenied) {
			t.Fatalf("Run returned %v, want ErrStoreRefused wrapping the store's ErrDenied", err)
		}
		t.Logf("gave up after %v and %d calls: %v", time.Since(began), calls.Load(), err)
		if took := time.Since(began); took > 10*renew {
			t.Errorf("gave up after %v, want within 10 rounds (%v)", took, 10*renew)
		}
		if len(r.rec.startsOf("telegram")) != 0 {
			t.Error("a leased key ran without its lease")
		}
	})
}

// TestRunKeepsTryingAfterOtherStoreErrors: an unreachable store is not a
// refusal, and MaxRefused < 0 never gives up on refusals either.
func TestRunKeepsTryingAfterOtherStoreErrors(t *testing.T) {
	for name, c := range map[string]struct {
		fault      error
		maxRefused int
	}{
		"unreachable":           {errors.New("connection refused"), 0},
		"denied, never give up": {store.Denied(errors.New("access denied")), -1},
	} {
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, st *memstore.Store) {
				st.SetFault(func(string) error { return c.fault })
				r := newReplica(t, st, "a", func(cfg *tenure.Config) { cfg.MaxRefused = c.maxRefused }).channels(t).start()
				advance(100 * renew)
				select {
				case err := <-r.done:
					t.Fatalf("Run returned %v after 100 rounds of %v, want it still trying", err, c.fault)
				default:
				}
				st.SetFault(nil)
				advance(2 * renew)
				wantRunning(t, "a once the store answers", r, "telegram", "discord", "github")
				if err := r.stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
			})
		})
	}
}
