package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
)

// TestARevokedHolderStopsAtOnceAndNobodyStartsBeforeItsTermEnds: an
// operator revokes the key (tenure release). The holder's next renewal is
// refused, so its runner stops within a round, and it never releases. The
// revoked term keeps its expiry, so no replica — the peer or the holder
// itself — starts again before that expiry + grace, measured from the
// holder's last confirmed renewal, and whoever does gets a newer epoch.
func TestARevokedHolderStopsAtOnceAndNobodyStartsBeforeItsTermEnds(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("waits TTL + grace of real time")
			}
			t.Parallel()
			open := be.site(t)
			const key = "discord"
			var tl timeline

			a := newReplica(t, "A", open(t), crashConfig(), tl.runner("A"), key).start()
			aStart := tl.await(t, 5*time.Second, 0, "A", "start", key)
			b := newReplica(t, "B", open(t), crashConfig(), tl.runner("B"), key).start()
			waitUntil(t, 5*time.Second, "B to be refused the key", func() bool { return b.st.Refusals() > 0 })
			time.Sleep(1500 * time.Millisecond)

			operator, ok := open(t).(store.Revoker)
			if !ok {
				t.Skipf("%s has no Revoke", be.name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			revoked, err := operator.Revoke(ctx, key)
			revokedAt := time.Now()
			if err != nil || !revoked {
				t.Fatalf("Revoke = %v, %v; want a live term revoked", revoked, err)
			}
			mark := tl.mark()

			aStop := tl.await(t, crashRenew+500*time.Millisecond, 0, "A", "stop", key)
			// A's renewals are refused from now on; a later confirmation
			// would be a new term of its own.
			last := a.st.Confirmed(key)
			if !errors.Is(aStop.cause, tenure.ErrLeaseLost) {
				t.Errorf("A's runner stopped by %v, want %v", aStop.cause, tenure.ErrLeaseLost)
			}
			// Wait for the next start, by either replica.
			var next event
			waitUntil(t, crashTTL+crashGrace+pollSlack+time.Second, "a new holder to start", func() bool {
				var ok bool
				if next, ok = tl.next(mark, "B", "start", key); ok {
					return true
				}
				next, ok = tl.next(mark, "A", "start", key)
				return ok
			})
			t.Logf("revoked → A's runner stopped %v; A's last confirmed renewal → revoked %v → %s started (epoch %d → %d) %v",
				aStop.at.Sub(revokedAt).Round(time.Millisecond), revokedAt.Sub(last).Round(time.Millisecond), next.who,
				aStart.epoch, next.epoch, next.at.Sub(revokedAt).Round(time.Millisecond))

			if d := next.at.Sub(last); d < crashTTL+crashGrace-stampSlack {
				t.Errorf("%s started %v after A's last confirmed renewal: the revoked term's expiry + grace was not waited out", next.who, d)
			} else if d > crashTTL+crashGrace+pollSlack {
				t.Errorf("%s started %v after A's last confirmed renewal, later than TTL + grace + %v", next.who, d, pollSlack)
			}
			if next.epoch <= aStart.epoch+1 && be.name != "redis" {
				t.Errorf("new epoch %d; want above the revoked term's %d", next.epoch, aStart.epoch+1)
			}
			if next.epoch <= aStart.epoch {
				t.Errorf("new epoch %d is not above A's %d", next.epoch, aStart.epoch)
			}
			if n := len(a.st.Releases()); n != 0 {
				t.Errorf("A called Release %d times for a term the store refused", n)
			}
		})
	}
}
