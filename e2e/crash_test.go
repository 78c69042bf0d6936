package e2e_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

// Timing of the crash tests: renewals every second, a peer may take a
// silent holder's key 4s after its last confirmed renewal.
const (
	crashTTL   = 3 * time.Second
	crashGrace = time.Second
	crashRenew = crashTTL / 3

	// stampSlack absorbs the resolution of the stores' expiry stamps
	// (SQLite stores milliseconds); the others stamp microseconds.
	stampSlack = 2 * time.Millisecond
	// pollSlack is the time allowed past expiry + grace for the peer to
	// notice, acquire and start, per the task: one second.
	pollSlack = time.Second
)

func crashConfig() tenure.Config {
	return tenure.Config{TTL: crashTTL, Grace: crashGrace, StopTimeout: time.Second}
}

func TestACrashedHolderIsReplacedEndToEnd(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("waits TTL + grace of real time")
			}
			t.Parallel()
			open := be.site(t)
			const key = "nightly-report"
			var tl timeline

			a := newReplica(t, "A", open(t), crashConfig(), tl.runner("A"), key).start()
			aStart := tl.await(t, 5*time.Second, 0, "A", "start", key)
			b := newReplica(t, "B", open(t), crashConfig(), tl.runner("B"), key).start()
			waitUntil(t, 5*time.Second, "B to be refused the key", func() bool { return b.st.Refusals() > 0 })

			// A keeps the key through at least one renewal while B waits.
			time.Sleep(1500 * time.Millisecond)
			if e, ok := tl.next(0, "B", "start", key); ok {
				t.Fatalf("B started (epoch %d) while A held the key and renewed it", e.epoch)
			}
			if e, ok := tl.next(0, "A", "stop", key); ok {
				t.Fatalf("A's runner stopped (%v) while A could renew", e.cause)
			}
			if got := b.sup.LeaderOf(key); got != a.sup.Owner() {
				t.Fatalf("B sees leader %q, want A (%s)", got, a.sup.Owner())
			}

			// A crashes: it never renews nor releases again.
			cut := a.st.Cut()
			bStart := tl.await(t, crashTTL+crashGrace+pollSlack+2*time.Second, 0, "B", "start", key)
			last := a.st.Confirmed(key)
			aStop, ok := tl.next(0, "A", "stop", key)
			if !ok {
				t.Fatal("B started while A's runner had not stopped")
			}

			sinceCut, sinceLast := bStart.at.Sub(cut), bStart.at.Sub(last)
			t.Logf("A's last confirmed renewal → cut %v; cut → A's runner stopped %v; cut → B started %v; "+
				"A's last confirmed renewal → B started %v (floor TTL+grace = %v); A stopped %v before B started",
				cut.Sub(last).Round(time.Millisecond), aStop.at.Sub(cut).Round(time.Millisecond),
				sinceCut.Round(time.Millisecond), sinceLast.Round(time.Millisecond), crashTTL+crashGrace,
				bStart.at.Sub(aStop.at).Round(time.Millisecond))

			if !aStop.at.Before(bStart.at) {
				t.Errorf("A's runner stopped at %v, not before B started", aStop.at.Sub(bStart.at))
			}
			if !errors.Is(aStop.cause, tenure.ErrDeadline) {
				t.Errorf("A's runner was stopped by %v, want %v", aStop.cause, tenure.ErrDeadline)
			}
			// The timing rule: A stops RenewEvery before its local deadline.
			if limit := last.Add(crashTTL - crashRenew + 250*time.Millisecond); aStop.at.After(limit) {
				t.Errorf("A's runner stopped %v after its last confirmed renewal, want by TTL-RenewEvery = %v",
					aStop.at.Sub(last), crashTTL-crashRenew)
			}
			if sinceLast < crashTTL+crashGrace-stampSlack {
				t.Errorf("B started %v after A's last confirmed renewal, before TTL + grace = %v", sinceLast, crashTTL+crashGrace)
			}
			if sinceCut < crashGrace {
				t.Errorf("B started %v after the cut, sooner than grace %v", sinceCut, crashGrace)
			}
			if sinceCut > crashTTL+crashGrace+pollSlack {
				t.Errorf("B started %v after the cut, later than TTL + grace + %v", sinceCut, pollSlack)
			}
			if bStart.epoch <= aStart.epoch {
				t.Errorf("B's epoch %d is not greater than A's %d", bStart.epoch, aStart.epoch)
			}

			// The partition heals: A's next renewal is refused, and A must
			// neither start again nor disturb B.
			mark := tl.mark()
			a.st.Heal()
			waitUntil(t, 3*crashRenew, "A to see B as leader", func() bool { return a.sup.LeaderOf(key) == b.sup.Owner() })
			time.Sleep(2 * crashRenew)
			if e, ok := tl.next(mark, "A", "start", key); ok {
				t.Errorf("A started again (epoch %d) after the partition healed, while B held the key", e.epoch)
			}
			if e, ok := tl.next(mark, "B", "stop", key); ok {
				t.Errorf("B's runner stopped (%v) once A was back", e.cause)
			}
			if a.sup.Holds(key) || !b.sup.Holds(key) {
				t.Errorf("after healing: A holds %v, B holds %v", a.sup.Holds(key), b.sup.Holds(key))
			}
		})
	}
}
