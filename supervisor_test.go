package tenure_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestOnlyTheLeaseHolderStartsAnExclusiveRunner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		advance(time.Second) // B's rounds fall between A's, as on real hosts
		b := newReplica(t, st, "B").channels(t).start()
		defer a.stop()
		defer b.stop()

		wantRunning(t, "A", a, "telegram", "discord", "github")
		wantRunning(t, "B", b, "github") // the webhook receiver runs everywhere
		if n := len(a.rec.startsOf("telegram")) + len(b.rec.startsOf("telegram")); n != 1 {
			t.Fatalf("telegram started %d times across replicas, want 1", n)
		}

		advance(renew) // A reports its runners running; B observes A
		for name, r := range map[string]*replica{"A": a, "B": b} {
			tg := r.KeyStatus("telegram")
			if !tg.Running || tenure.OwnerName(tg.Leader) != "A" || !tg.Leased || tg.RunningOn != a.Owner() {
				t.Fatalf("%s: telegram status %+v, want running on A (A's own word, or its report to B), leader A", name, tg)
			}
			gh := r.KeyStatus("github")
			if !gh.Running || gh.Leased || gh.Leader != "" {
				t.Fatalf("%s: github status %+v, want running without a leader", name, gh)
			}
		}
		if !a.KeyStatus("telegram").LeaderHere || b.KeyStatus("telegram").LeaderHere {
			t.Fatal("leader_here must be true on A only")
		}
		if tenure.OwnerName(b.LeaderOf("telegram")) != "A" || b.LeaderOf("github") != "" {
			t.Fatalf("B: LeaderOf(telegram)=%q LeaderOf(github)=%q", b.LeaderOf("telegram"), b.LeaderOf("github"))
		}
	})
}

func TestAStoppingHolderReleasesAndThePeerTakesOverWithFreshlyLoadedConfig(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		b := newReplica(t, st, "B").channels(t)
		// A takeover reloads the key's config: credentials saved since B started.
		for _, key := range []string{"telegram", "discord"} {
			b.Set(key, tenure.Job{
				Runner: b.rec.runner(key + "-stale"),
				Reload: func(ctx context.Context, key string) (tenure.Runner, error) {
					return b.rec.runner(key + "-rotated"), nil
				},
			})
		}
		b.start()
		defer b.stop()
		epoch := lease(t, st, "telegram").Epoch

		stoppedAt := time.Now()
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		// B may already have taken it: either way A did not leave it to expire.
		if l := lease(t, st, "telegram"); !(tenure.OwnerName(l.Owner) == "A" && l.Released) && tenure.OwnerName(l.Owner) != "B" {
			t.Fatalf("after A stopped: %+v, want released by A", l)
		}
		advance(0) // B reacts to the release event, not to its next round

		wantRunning(t, "B", b, "telegram", "discord", "github")
		got := b.rec.startsOf("telegram")
		if len(got) != 1 || got[0].config != "telegram-rotated" {
			t.Fatalf("B started telegram with %+v, want the freshly loaded config", got)
		}
		if got[0].at != stoppedAt {
			t.Fatalf("B took over %v after the release; a push event should make it immediate", got[0].at.Sub(stoppedAt))
		}
		if l := lease(t, st, "telegram"); tenure.OwnerName(l.Owner) != "B" || l.Epoch <= epoch {
			t.Fatalf("after takeover: %+v, want B with an epoch above %d", l, epoch)
		}
		if got[0].epoch != lease(t, st, "telegram").Epoch {
			t.Fatal("the runner must receive the epoch of the term it runs under")
		}
	})
}

func TestALostLeaseStopsTheRunnerAndShutdownLeavesThePeersRowAlone(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		// A peer took the row over with a newer epoch.
		old := lease(t, st, "telegram")
		st.Put(store.Lease{Key: "telegram", Owner: "B", Epoch: old.Epoch + 1, TimeLeft: ttl})

		advance(renew)
		wantRunning(t, "A", a, "discord", "github")
		advance(renew) // later rounds only observe the peer; nothing restarts
		wantRunning(t, "A", a, "discord", "github")
		if n := len(a.rec.startsOf("telegram")); n != 1 {
			t.Fatalf("telegram started %d times, want 1", n)
		}
		if got := a.KeyStatus("telegram").Leader; got != "B" {
			t.Fatalf("leader %q, want B", got)
		}
		if err := a.stop(); err != nil {
			t.Fatal(err)
		}
		if l := lease(t, st, "telegram"); tenure.OwnerName(l.Owner) != "B" || !l.Live {
			t.Fatalf("shutdown touched the peer's lease: %+v", l)
		}
	})
}

func TestUnconfirmedRenewalsStopTheRunnerBeforeAPeerMayStart(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		granted := time.Now()
		a := newReplica(t, st, "A").channels(t).start()
		defer a.stop()
		st.SetFault(func(string) error { return errors.New("database unreachable") })

		advance(renew)
		wantRunning(t, "A", a, "telegram", "discord", "github") // one missed renewal is tolerated

		// The next tick would be at the local deadline: the runners stop
		// now, exactly RenewEvery before it.
		advance(renew - time.Millisecond)
		wantRunning(t, "A", a, "telegram", "discord", "github")
		advance(time.Millisecond)
		wantRunning(t, "A", a, "github")
		stopped := time.Now()
		// A peer may start only TTL + grace after the last confirmed
		// renewal was sent: the stop leaves grace + one interval of margin.
		if margin := granted.Add(ttl + grace).Sub(stopped); margin < renew+grace {
			t.Fatalf("runner stopped %v before a peer may start, want at least %v", margin, renew+grace)
		}
		// The row is not released: the store may be the one unreachable.
		st.SetFault(nil)
		if l := lease(t, st, "telegram"); tenure.OwnerName(l.Owner) != "A" || l.Released {
			t.Fatalf("lease after a deadline stop: %+v", l)
		}
	})
}

func TestPathsOnANonHolderNeverStartTheRunner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		b := newReplica(t, st, "B").channels(t).start()
		defer a.stop()
		defer b.stop()
		ctx := context.Background()

		if ok, err := b.EnsureRunning(ctx, "telegram"); ok || err != nil {
			t.Fatalf("EnsureRunning on a non-holder: %v, %v", ok, err)
		}
		if ok, err := b.Restart(ctx, "telegram"); ok || err != nil {
			t.Fatalf("Restart on a non-holder: %v, %v", ok, err)
		}
		if tenure.OwnerName(b.LeaderOf("telegram")) != "A" {
			t.Fatalf("B sees leader %q", b.LeaderOf("telegram"))
		}
		// New config is accepted (the holder serves the key) but starts nothing here.
		if err := b.Set("telegram", tenure.Job{Runner: b.rec.runner("telegram-2")}); err != nil {
			t.Fatal(err)
		}
		advance(renew)
		if n := len(b.rec.startsOf("telegram")); n != 0 {
			t.Fatalf("B started telegram %d times", n)
		}
		if !b.KeyStatus("telegram").Configured {
			t.Fatal("B forgot the config it was given")
		}
		if n := len(a.rec.startsOf("telegram")); n != 1 {
			t.Fatalf("telegram started %d times on A, want 1", n)
		}
	})
}

func TestARunnerThatFailsToStopKeepsItsLeaseOnShutdown(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A")
		a.rec.ignoreCancel = true
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		defer close(a.rec.unstick)

		err := a.stop()
		if !errors.Is(err, tenure.ErrStopTimeout) {
			t.Fatalf("Run returned %v, want ErrStopTimeout", err)
		}
		l := lease(t, st, "telegram")
		if tenure.OwnerName(l.Owner) != "A" || l.Released || !l.Live {
			t.Fatalf("lease of a runner that did not stop: %+v, want left to expire", l)
		}
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()
		if len(b.rec.startsOf("telegram")) != 0 {
			t.Fatal("the peer started while the old runner may still be alive")
		}
	})
}

func TestRemovingAKeyReleasesItsLeaseForAPeer(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		b := newReplica(t, st, "B").channels(t).start()
		defer a.stop()
		defer b.stop()

		if err := a.Remove(context.Background(), "telegram"); err != nil {
			t.Fatal(err)
		}
		// B reacts to the release at once, so it may already hold the key.
		if l := lease(t, st, "telegram"); !(tenure.OwnerName(l.Owner) == "A" && l.Released) && tenure.OwnerName(l.Owner) != "B" {
			t.Fatalf("after Remove: %+v, want released", l)
		}
		advance(0)
		wantRunning(t, "B", b, "telegram", "github")
	})
}

func TestAKeyDisabledOnTheHolderIsStoppedAndReleased(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		defer a.stop()
		if err := a.SetEnabled("discord", false); err != nil {
			t.Fatal(err)
		}
		advance(0)
		wantRunning(t, "A", a, "telegram", "github")
		if l := lease(t, st, "discord"); !l.Released {
			t.Fatalf("disabled key's lease %+v, want released", l)
		}
		if st := a.KeyStatus("discord"); st.Enabled || !st.Configured {
			t.Fatalf("status %+v, want configured and disabled", st)
		}
	})
}

func TestPeerKeysAreLeftToTheHolder(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		b := newReplica(t, st, "B").channels(t).start()
		defer a.stop()
		defer b.stop()
		if got := a.PeerKeys(); len(got) != 0 {
			t.Fatalf("A sees peer keys %v", got)
		}
		if got := b.PeerKeys(); !slices.Equal(got, []string{"discord", "telegram"}) {
			t.Fatalf("B sees peer keys %v", got)
		}
	})
}

func TestAKeyLedByAPeerIsReportedAlthoughAbsentFromLocalConfig(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A")
		b := newReplica(t, st, "B")
		for _, r := range []*replica{a, b} {
			r.Set("github", tenure.Job{Runner: r.rec.runner("github"), Mode: tenure.Everywhere})
			r.start()
			defer r.stop()
			advance(time.Second) // B's rounds fall between A's
		}
		// Connected from a UI on A: it never enters B's config.
		if err := a.Set("telegram", tenure.Job{Runner: a.rec.runner("ui-token")}); err != nil {
			t.Fatal(err)
		}
		advance(0)
		wantRunning(t, "A", a, "telegram", "github")
		// The push channel tells B of the acquisition before its next read
		// of the lease table; only that read says whether A's runner runs.
		if !slices.Equal(b.PeerKeys(), []string{"telegram"}) {
			t.Fatalf("B peer keys %v after A's acquisition was pushed, want [telegram]", b.PeerKeys())
		}
		if s := b.KeyStatus("telegram"); tenure.OwnerName(s.Leader) != "A" || s.Running {
			t.Fatalf("B's status of telegram before its read %+v", s)
		}

		advance(renew) // both rounds: A reports running, B reads the table
		if !slices.Equal(b.PeerKeys(), []string{"telegram"}) {
			t.Fatalf("B peer keys %v, want [telegram]", b.PeerKeys())
		}
		s := b.KeyStatus("telegram")
		if tenure.OwnerName(s.Leader) != "A" || s.LeaderHere || !s.Running || s.Configured {
			t.Fatalf("B's status of telegram %+v", s)
		}
		if len(b.rec.startsOf("telegram")) != 0 {
			t.Fatal("observing must never start anything")
		}

		if err := a.Remove(context.Background(), "telegram"); err != nil {
			t.Fatal(err)
		}
		advance(renew)
		if len(b.PeerKeys()) != 0 || b.KeyStatus("telegram").Leader != "" {
			t.Fatalf("after release B still reports %v, leader %q", b.PeerKeys(), b.KeyStatus("telegram").Leader)
		}
	})
}

func TestACrashedHolderIsReplacedAtExpiryPlusGraceAndNoSooner(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &testenv.Partition{Store: st}
		a := newReplica(t, cut, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		defer a.stop()
		advance(3 * time.Second)
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()

		advance(renew) // A renews at 10s; B must not take a live lease
		lastRenewal := time.Now().Add(-3 * time.Second)
		cut.Cut.Store(true)
		advance(ttl + grace)
		got := b.rec.startsOf("telegram")
		if len(got) != 1 {
			t.Fatalf("B started %d times after the crash", len(got))
		}
		if took := got[0].at.Sub(lastRenewal); took != ttl+grace {
			t.Fatalf("B took over %v after A's last renewal, want exactly TTL + grace = %v", took, ttl+grace)
		}
		if aStops := a.rec.startsOf("telegram"); len(aStops) != 1 {
			t.Fatalf("A started %d times", len(aStops))
		}
		if a.running()["telegram"] {
			t.Fatal("A, cut off, still runs telegram")
		}
	})
}

// heldReply delays the reply to the first acquisition until release is
// closed, after the store has granted it: a reply slow on the wire.
type heldReply struct {
	store.Store
	n       atomic.Int32
	granted chan struct{}
	release chan struct{}
}

func (h *heldReply) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	res, err := h.Store.Acquire(ctx, req)
	if h.n.Add(1) == 1 {
		close(h.granted)
		<-h.release
	}
	return res, err
}

// At most one replica runs a key. A reply to the loop's acquisition that
// arrives late — after EnsureRunning took a newer term, the key was
// disabled (its term released) and a peer took it — must not make this
// replica run the key again on the superseded term while the peer runs it.
func TestALateAcquireReplyNeverStartsARunnerBesideThePeerThatTookTheKey(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &runLog{}
		slow := &heldReply{Store: st, granted: make(chan struct{}), release: make(chan struct{})}
		a := newReplica(t, slow, "A")
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start() // the loop's acquisition is granted; its reply is on its way
		<-slow.granted
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: runs.runner("B")})
		b.start()
		defer b.stop()

		if ok, err := a.EnsureRunning(context.Background(), "telegram"); !ok || err != nil {
			t.Fatalf("EnsureRunning: %v, %v", ok, err)
		}
		synctest.Wait()
		a.SetEnabled("telegram", false) // stopped, and its term released: B takes it
		synctest.Wait()
		a.SetEnabled("telegram", true)
		synctest.Wait()
		close(slow.release) // the first reply lands, within CallTimeout
		synctest.Wait()
		advance(time.Second)
		defer a.stop()

		for _, r := range runs.of("telegram") {
			t.Logf("%s ran epoch %d; still running: %v", r.replica, r.epoch, r.ended.IsZero())
		}
		wantNoOverlap(t, runs)
	})
}

// A store whose List fails at once (connection refused, permission
// denied) must not turn a pending orphan recheck into a busy loop: the
// supervision loop waits for replanAt, finds the table unreadable, and
// must not try again at once, over and over, until the next round.
func TestAnUnreadableTableNeverMakesAPendingRecheckSpin(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		// A live peer that claims nothing: the keys it is preferred for
		// are orphans, claimed after OrphanDelay (a recheck is pending).
		st.Put(store.Lease{Key: "~workers/mail/Z#00000000@1", Owner: "Z#00000000", Epoch: 1, Running: true, TimeLeft: time.Hour})
		a := poolWorker(t, st, "A", tenure.StaticKeys(poolKeys(40)...), newLedger(t))
		a.start()
		defer a.stop()
		advance(renew + time.Second) // A's first settled plan: orphans due at RenewEvery + OrphanDelay
		var lists atomic.Int64
		const healAfter = 5000
		st.SetFault(func(op string) error {
			if op != memstore.OpList {
				return nil
			}
			if lists.Add(1) >= healAfter {
				st.SetFault(nil) // end the spin so the test can report it
			}
			return errors.New("connection refused")
		})
		advance(renew)
		if n := lists.Load(); n > 10 {
			t.Fatalf("%d reads of the lease table in one RenewEvery while it could not be read: a busy loop", n)
		}
	})
}
