package e2e_test

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
)

// A release made after a replica's refused acquisition but before its
// watch has subscribed sends that replica no event. Once subscribed, the
// supervisor retries every wanted key it does not hold, so such a release
// is still handed over at once rather than at the next round (RenewEvery,
// 5s by default). A rolling restart — the old replica stops as soon as the
// new one is up — lands in this window. Here B's subscription is held back
// by a second (a new TLS connection to a remote store takes 50–300ms), so
// the release surely falls in it; B must start within a second of its
// subscription.
func TestAReleaseBeforeThePeerSubscribesIsStillHandedOverAtOnce(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			open := be.site(t)
			const key = "telegram"
			var tl timeline

			a := newReplica(t, "A", open(t), tenure.Config{}, tl.runner("A"), key).start()
			tl.await(t, 5*time.Second, 0, "A", "start", key)
			b := newReplica(t, "B", open(t), tenure.Config{}, tl.runner("B"), key)
			b.st.watchDelay = time.Second
			b.start()
			waitUntil(t, 5*time.Second, "B to be refused", func() bool { return b.st.Refusals() > 0 })

			if err := a.stop(); err != nil {
				t.Fatalf("A's Run: %v", err)
			}
			released := a.st.Releases()[0]
			bStart := tl.await(t, 10*time.Second, 0, "B", "start", key)
			// B may also find the release in its own first read of the
			// lease table, before it subscribes: that is as fast.
			subscribed := b.st.WatchedAt()
			from := released
			if subscribed.After(released) {
				from = subscribed
			}
			t.Logf("A released; %v later B subscribed; %v after the release B started",
				subscribed.Sub(released).Round(time.Millisecond), bStart.at.Sub(released).Round(time.Millisecond))
			if d := bStart.at.Sub(from); d > time.Second {
				t.Errorf("B started %v after A's release and its own subscription; the release came while "+
					"B was subscribing, and B found it only at its next round (RenewEvery = %v)", d, tenure.DefaultTTL/3)
			}
		})
	}
}
