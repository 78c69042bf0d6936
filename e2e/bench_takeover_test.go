package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkCrashTakeover measures how long a key stays without a runner
// when its holder crashes, with TTL 3s and grace 1s. Each iteration is one
// takeover on a fresh key: A holds, B is refused, then — at a random point
// of A's renewal cycle — A is partitioned from the store (it neither renews
// nor releases, as a crashed process), and B's runner starts.
//
//	go test -run '^$' -bench 'CrashTakeover' -benchtime 5x ./e2e/
//
// Measured, with the monotonic clock of the one process:
//   - renewal→start: from the send time of A's last confirmed renewal (a
//     wrapper around A's store records it just before each call) to B's
//     runner starting. The store stamped A's expiry no earlier than that
//     send time + TTL, so this can never be below TTL + grace = 4s; the
//     excess is how late B noticed, acquired and started;
//   - cut→start: from the partition to B's runner starting.
//
// Every takeover is also checked: B starts no sooner than TTL + grace
// after A's last confirmed renewal, A's runner stopped before B's started,
// and the epoch grew.
func BenchmarkCrashTakeover(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			open := be.site(b)
			stA, stB := open(b), open(b)
			var fromRenewal, fromCut, stopToStart, renewalToStop samples
			i := 0
			for b.Loop() {
				i++
				key := fmt.Sprintf("takeover-%d", i)
				var tl timeline
				a := newReplica(b, "A", stA, crashConfig(), tl.runner("A"), key).start()
				aStart := tl.await(b, 5*time.Second, 0, "A", "start", key)
				r := newReplica(b, "B", stB, crashConfig(), tl.runner("B"), key).start()
				waitUntil(b, 5*time.Second, "B to be refused", func() bool { return r.st.Refusals() > 0 })
				time.Sleep(rand.N(crashRenew))

				cut := a.st.Cut()
				bStart := tl.await(b, crashTTL+crashGrace+pollSlack+2*time.Second, 0, "B", "start", key)
				last := a.st.Confirmed(key)
				aStop, ok := tl.next(0, "A", "stop", key)
				switch {
				case !ok || !aStop.at.Before(bStart.at):
					b.Errorf("takeover %d: B started before A's runner stopped", i)
				case bStart.at.Sub(last) < crashTTL+crashGrace-stampSlack:
					b.Errorf("takeover %d: B started %v after A's last confirmed renewal, before TTL + grace",
						i, bStart.at.Sub(last))
				case bStart.epoch <= aStart.epoch:
					b.Errorf("takeover %d: epoch %d → %d", i, aStart.epoch, bStart.epoch)
				}
				fromRenewal = append(fromRenewal, bStart.at.Sub(last))
				fromCut = append(fromCut, bStart.at.Sub(cut))
				stopToStart = append(stopToStart, bStart.at.Sub(aStop.at))
				renewalToStop = append(renewalToStop, aStop.at.Sub(last))
				if err := r.stop(); err != nil {
					b.Errorf("B's Run: %v", err)
				}
				if err := a.stop(); err != nil {
					b.Errorf("A's Run: %v", err)
				}
			}
			fromRenewal.report(b, "renewal-start")
			fromCut.report(b, "cut-start")
			stopToStart.report(b, "Astop-Bstart")
			renewalToStop.report(b, "renewal-Astop")
			b.Logf("floor TTL+grace = %v; target renewal→start ≤ TTL+grace+200ms = %v",
				crashTTL+crashGrace, crashTTL+crashGrace+200*time.Millisecond)
		})
	}
}
