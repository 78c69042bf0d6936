package tenure_test

// Tests written by the engine review of the day's changes: each pins a
// behaviour doc.go promises and the code did not keep.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A replica whose host once slept (its deadline clock runs ahead of
// time.Now by the time slept) must still take over a crashed peer's key at
// expiry + grace: the retry time of a refused acquisition is on the
// keeper's clock and must not be compared with time.Now, or every retry
// is pushed back by the whole time the host ever slept.
func TestAReplicaWhoseHostOnceSleptTakesOverAtExpiryPlusGrace(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &partition{Store: st}
		a := newReplica(t, cut, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		defer a.stop()
		advance(3 * time.Second)
		b := newReplica(t, st, "B")
		tenure.StageSuspend(b.Supervisor, func() time.Duration { return time.Hour }) // slept an hour before this test
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()

		advance(renew)
		lastRenewal := time.Now().Add(-3 * time.Second)
		cut.cut.Store(true) // A crashes
		advance(ttl + grace + renew)
		got := b.rec.startsOf("telegram")
		if len(got) != 1 {
			t.Fatalf("B started telegram %d times in TTL + grace + RenewEvery after A's crash, want once", len(got))
		}
		if took := got[0].at.Sub(lastRenewal); took != ttl+grace {
			t.Fatalf("B took over %v after A's last renewal, want TTL + grace = %v", took, ttl+grace)
		}
	})
}

// The suspend path is a deadline path: on resume, runners whose deadline
// passed while the host slept stop at once, and — like the watchdog — it
// must not wait on a log handler first (doc.go: a blocked log handler
// cannot delay the cancellation).
func TestAStalledLogSinkNeverDelaysTheStopAfterAHostSuspend(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		var slept atomic.Int64
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()))
		tenure.StageSuspend(a.Supervisor, func() time.Duration { return time.Duration(slept.Load()) })
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		advance(renew + time.Second)
		g.stall()
		slept.Store(int64(time.Hour)) // the host slept an hour and resumes now
		resumed := time.Now()
		advance(time.Second)
		got := runs.of("telegram")
		if len(got) == 0 || got[0].ended.IsZero() {
			t.Fatalf("runs %+v: with the log sink stalled, the runner outlived a deadline that passed while the host slept", got)
		}
		if d := got[0].ended.Sub(resumed); d > 250*time.Millisecond || !errors.Is(got[0].cause, tenure.ErrDeadline) {
			t.Fatalf("the runner stopped %v after the resume with %v, want within 250ms with ErrDeadline", d, got[0].cause)
		}
	})
}

// A renewal the store refuses stops the runner at once (doc.go: "lost ...
// the runner stops at once") — every refused key's runner, not only the
// first: one key's "lease lost" log line, written to a stalled sink, must
// not keep the next lost key's runner going until its deadline while the
// peer that took it already runs.
func TestEveryLeaseLostInOneRenewalStopsAtOnceWhateverTheLogSinkDoes(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		runs := &runLog{}
		a := newReplica(t, st, "A", withLogger(g.logger()))
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.Set("discord", tenure.Job{Runner: runs.runner("A")})
		a.start()
		defer func() {
			g.open()
			a.stop()
		}()
		advance(renew / 2)
		g.stall()
		// The table cannot be read (so the supervision loop, which logs
		// that, is no help), and both keys now belong to B: the store lost
		// A's terms and B took them.
		for _, key := range []string{"telegram", "discord"} {
			old := lease(t, st, key)
			st.Put(store.Lease{Key: key, Owner: "B", Epoch: old.Epoch + 1, TimeLeft: ttl})
		}
		st.SetFault(func(op string) error {
			if op == memstore.OpList {
				return errors.New("connection reset")
			}
			return nil
		})
		advance(renew/2 + time.Second) // A's renewal at RenewEvery is refused for both
		for _, key := range []string{"telegram", "discord"} {
			got := runs.of(key)
			if len(got) != 1 || got[0].ended.IsZero() || !errors.Is(got[0].cause, tenure.ErrLeaseLost) {
				t.Errorf("%s: runs %+v; want its one run stopped with ErrLeaseLost at the refused renewal", key, got)
			}
		}
	})
}

// Graceful handoff on shutdown: every lease is released so a peer takes
// it at once. EnsureRunning (or Restart) called while Run is shutting down
// — an HTTP "ensure ready" probe racing a deploy — must not start a new
// term that nobody releases, leaving the peer to wait for TTL + grace.
func TestEnsureRunningDuringShutdownLeavesNoLeaseBehind(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A")
		a.Set("telegram", tenure.Job{Runner: a.rec.runner("t")})
		a.start()
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: b.rec.runner("t")})
		b.start()
		defer b.stop()
		advance(time.Second)
		st.SetFault(func(op string) error {
			if op == memstore.OpRelease {
				time.Sleep(time.Second) // a store round trip on shutdown
			}
			return nil
		})
		a.cancel() // shutdown: the runner stops, the release is on its way
		synctest.Wait()
		running, err := a.EnsureRunning(context.Background(), "telegram")
		t.Logf("EnsureRunning during shutdown: %v, %v", running, err)
		if err := <-a.done; err != nil {
			t.Fatal(err)
		}
		st.SetFault(nil)
		stopped := time.Now()
		advance(time.Second)
		if l := lease(t, st, "telegram"); l.Live && l.Owner == a.Owner() {
			t.Errorf("after A's Run returned the store shows A's live term %d: %+v", l.Epoch, l)
		}
		if got := b.rec.startsOf("telegram"); len(got) != 1 || got[0].at.Sub(stopped) > time.Second {
			t.Fatalf("B started telegram %v after A shut down, want at once", got)
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
