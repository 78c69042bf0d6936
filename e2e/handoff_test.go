package e2e_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

// TestAGracefulShutdownHandsTheKeyToThePeerAtOnce runs with the default
// timing (TTL 15s, grace 5s, renewals every 5s). The peer's first round
// saw the key held; its next round is about 5s later and A's lease would
// free only 20s after its last renewal — so a handoff within a second came
// through the store's push channel (in-process for SQLite).
func TestAGracefulShutdownHandsTheKeyToThePeerAtOnce(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			open := be.site(t)
			const key = "telegram"
			var tl timeline
			cfg := tenure.Config{}

			a := newReplica(t, "A", open(t), cfg, tl.runner("A"), key).start()
			aStart := tl.await(t, 5*time.Second, 0, "A", "start", key)
			b := newReplica(t, "B", open(t), cfg, tl.runner("B"), key).start()
			waitUntil(t, 5*time.Second, "B to be refused the key", func() bool { return b.st.Refusals() > 0 })
			time.Sleep(300 * time.Millisecond)

			cancelled := time.Now()
			if err := a.stop(); err != nil {
				t.Fatalf("A's Run: %v", err)
			}
			bStart := tl.await(t, 3*time.Second, 0, "B", "start", key)
			aStop, ok := tl.next(0, "A", "stop", key)
			if !ok {
				t.Fatal("A's Run returned without its runner stopping")
			}
			releases := a.st.Releases()
			if len(releases) != 1 {
				t.Fatalf("A called Release %d times, want once", len(releases))
			}
			t.Logf("A's Run cancelled → B's runner started: %v; A's Release call → B's runner started: %v",
				bStart.at.Sub(cancelled), bStart.at.Sub(releases[0]))

			if !errors.Is(aStop.cause, tenure.ErrStopping) {
				t.Errorf("A's runner stopped by %v, want %v", aStop.cause, tenure.ErrStopping)
			}
			if !aStop.at.Before(releases[0]) {
				t.Errorf("A released %v before its runner stopped", aStop.at.Sub(releases[0]))
			}
			if !aStop.at.Before(bStart.at) {
				t.Errorf("B started %v before A's runner stopped", aStop.at.Sub(bStart.at))
			}
			if bStart.epoch <= aStart.epoch {
				t.Errorf("B's epoch %d is not greater than A's %d", bStart.epoch, aStart.epoch)
			}
			if d := bStart.at.Sub(cancelled); d > time.Second {
				t.Errorf("B started %v after A's shutdown began; a pushed release should take milliseconds", d)
			}
		})
	}
}
