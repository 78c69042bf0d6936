package e2e_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// Reproduce with:
//
//	go test -run '^$' -bench 'GracefulHandoff' -benchtime 200x ./e2e/
//
// Every iteration is one handoff: the holder's key is disabled, so its
// runner stops and its lease is released; the peer's runner starts. Then
// the old holder enables the key again and is refused (the peer holds it),
// ready to take it back on the next iteration. Default timing (TTL 15s,
// grace 5s, rounds every 5s): a handoff well under 5s came through the
// store's push channel, not a round.
//
// Measured, with the monotonic clock of one process:
//   - release→start: from the holder's Release call entering the store to
//     the peer's runner starting — the store's push path plus the peer's
//     acquisition and start;
//   - disable→start: from SetEnabled(false) on the holder, so including its
//     runner's stop, to the peer's runner starting.
func BenchmarkGracefulHandoff(b *testing.B) {
	const key = "telegram"
	for _, be := range append(backends[:len(backends):len(backends)], etcdBackend) {
		b.Run(be.name, func(b *testing.B) {
			open := be.site(b)
			var tl timeline
			reps := [2]*replica{
				newReplica(b, "A", open(b), tenure.Config{}, tl.runner("A"), key),
				newReplica(b, "B", open(b), tenure.Config{}, tl.runner("B"), key),
			}
			reps[0].start()
			last := tl.await(b, 5*time.Second, 0, "A", "start", key)
			reps[1].start()
			waitUntil(b, 5*time.Second, "B to be refused", func() bool { return reps[1].st.Refusals() > 0 })
			// Measure the steady state: a release made before a replica
			// has subscribed is found only when the subscription starts
			// (Supervisor.onSubscribed) or at the next round.
			waitUntil(b, 5*time.Second, "both replicas to watch", func() bool {
				return reps[0].st.Watching() && reps[1].st.Watching()
			})

			var fromRelease, fromDisable samples
			holder := 0
			for b.Loop() {
				h, p := reps[holder], reps[1-holder]
				mark, released := tl.mark(), len(h.st.Releases())
				disabled := time.Now()
				if err := h.sup.SetEnabled(key, false); err != nil {
					b.Fatal(err)
				}
				start := tl.await(b, 10*time.Second, mark, p.name, "start", key)
				checkHandoff(b, &tl, mark, h.name, last, start)
				rel := h.st.Releases()
				if len(rel) != released+1 {
					b.Fatalf("%s made %d Release calls in one handoff", h.name, len(rel)-released)
				}
				fromRelease = append(fromRelease, start.at.Sub(rel[released]))
				if d := start.at.Sub(rel[released]); d > time.Second {
					b.Logf("handoff %d (%s → %s) took %v", len(fromRelease), h.name, p.name, d)
				}
				fromDisable = append(fromDisable, start.at.Sub(disabled))

				refused := h.st.Refusals()
				if err := h.sup.SetEnabled(key, true); err != nil {
					b.Fatal(err)
				}
				waitUntil(b, 5*time.Second, h.name+" to be refused", func() bool { return h.st.Refusals() > refused })
				holder, last = 1-holder, start
			}
			fromRelease.report(b, "release-start")
			fromDisable.report(b, "disable-start")
		})
	}
}

// checkHandoff fails the benchmark when the new holder started before the
// old one's runner stopped, or without a greater epoch.
func checkHandoff(b *testing.B, tl *timeline, mark int, old string, prev, start event) {
	b.Helper()
	stop, ok := tl.next(mark, old, "stop", start.key)
	if !ok || !stop.at.Before(start.at) {
		b.Fatalf("%s started before %s's runner stopped", start.who, old)
	}
	if start.epoch <= prev.epoch {
		b.Fatalf("epoch went from %d to %d", prev.epoch, start.epoch)
	}
}

// BenchmarkGracefulHandoffSQLiteTwoProcesses bounces a key between this
// process and a child process sharing one SQLite file. Times cross the
// process boundary, so they are wall-clock times of the one host. A random
// pause before each handoff, up to the interval of whatever finds the
// release, spreads releases evenly over its phase.
//
//   - watch-poll=50ms: store/sqlite's default; Watch polls the file for
//     other processes' changes every 50ms. Default engine timing.
//   - watch-poll=off: no poller; the peer's engine finds the release in its
//     next round's read of the lease table. TTL 3s, so rounds every 1s.
//
// Reproduce with:
//
//	go test -run '^$' -bench 'GracefulHandoffSQLiteTwoProcesses/watch-poll=50ms' -benchtime 100x ./e2e/
//	go test -run '^$' -bench 'GracefulHandoffSQLiteTwoProcesses/watch-poll=off' -benchtime 40x ./e2e/
func BenchmarkGracefulHandoffSQLiteTwoProcesses(b *testing.B) {
	for _, c := range []struct {
		name       string
		poll       time.Duration
		ttl, grace time.Duration
		phase      time.Duration
	}{
		{"watch-poll=50ms", sqlite.DefaultWatchPoll, tenure.DefaultTTL, tenure.DefaultGrace, 2 * sqlite.DefaultWatchPoll},
		{"watch-poll=off", -1, crashTTL, crashGrace, crashRenew},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchTwoProcesses(b, c.poll, c.ttl, c.grace, c.phase)
		})
	}
}

func benchTwoProcesses(b *testing.B, poll, ttl, grace, phase time.Duration) {
	const key = "nightly-report"
	path := filepath.Join(b.TempDir(), "leases.db")
	var tl timeline
	cfg := tenure.Config{TTL: ttl, Grace: grace}
	parent := newReplica(b, "parent", openSQLite(b, path, sqlite.Options{WatchPoll: poll}), cfg, tl.runner("parent"), key).start()
	last := tl.await(b, 5*time.Second, 0, "parent", "start", key)
	c := startChild(b, &tl, childSpec{Path: path, Key: key, TTL: ttl, Grace: grace, WatchPoll: poll})
	waitUntil(b, 10*time.Second, "the child to be refused", func() bool { return c.Refusals() > 0 })
	waitUntil(b, 5*time.Second, "the parent to watch", parent.st.Watching)
	// The child reports no subscription; its first round (just done) came
	// after its Run started the watch, and a moment more lets it subscribe.
	time.Sleep(100 * time.Millisecond)

	var toChild, toParent samples
	parentHolds := true
	for b.Loop() {
		time.Sleep(rand.N(phase))
		mark := tl.mark()
		if parentHolds {
			released := len(parent.st.Releases())
			if err := parent.sup.SetEnabled(key, false); err != nil {
				b.Fatal(err)
			}
			start := tl.await(b, ttl+grace, mark, "child", "start", key)
			checkHandoff(b, &tl, mark, "parent", last, start)
			toChild = append(toChild, start.at.Sub(parent.st.Releases()[released]))
			refused := parent.st.Refusals()
			if err := parent.sup.SetEnabled(key, true); err != nil {
				b.Fatal(err)
			}
			waitUntil(b, 5*time.Second, "the parent to be refused", func() bool { return parent.st.Refusals() > refused })
			last = start
		} else {
			released := len(c.Releases())
			c.send(b, "disable")
			start := tl.await(b, ttl+grace, mark, "parent", "start", key)
			waitUntil(b, 5*time.Second, "the child's release report", func() bool { return len(c.Releases()) > released })
			checkHandoff(b, &tl, mark, "child", last, start)
			toParent = append(toParent, start.at.Sub(c.Releases()[released]))
			refused := c.Refusals()
			c.send(b, "enable")
			waitUntil(b, 5*time.Second, "the child to be refused", func() bool { return c.Refusals() > refused })
			last = start
		}
		parentHolds = !parentHolds
	}
	toChild.report(b, "to-child")
	toParent.report(b, "to-parent")
	append(toChild, toParent...).report(b, "release-start")
}
