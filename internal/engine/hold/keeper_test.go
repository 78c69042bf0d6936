package hold_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// The reference timing: lease 30s, grace 10s, renew every 10s, calls
// bounded at 5s. Tests run in a synctest bubble, so time.Sleep moves a fake
// clock that the keeper and the in-memory store both read.
var timing = hold.Timing{TTL: 30 * time.Second, Grace: 10 * time.Second, RenewEvery: 10 * time.Second, CallTimeout: 5 * time.Second}

func newKeeper(st store.Store, owner string) *hold.Keeper {
	return hold.New(st, owner, timing, nil)
}

func mustAcquire(t *testing.T, k *hold.Keeper, key string) hold.Acquired {
	t.Helper()
	res, err := k.Acquire(context.Background(), key, true)
	if err != nil || !res.OK {
		t.Fatalf("acquire %q: %+v, %v", key, res, err)
	}
	return res
}

var errUnreachable = errors.New("connection refused")

func failRenewals(op string) error {
	if op == memstore.OpRenew {
		return errUnreachable
	}
	return nil
}

func TestOneMissedRenewalIsToleratedTheSecondIsNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		k := newKeeper(st, "A")
		mustAcquire(t, k, "telegram") // sent at T=1000 in the reference's terms
		st.SetFault(failRenewals)

		time.Sleep(10 * time.Second) // 1010
		out, err := k.RenewAll(context.Background(), nil)
		if out["telegram"] != hold.Unconfirmed || err == nil {
			t.Fatalf("renewal against an unreachable store: %v, %v; want unconfirmed with an error", out, err)
		}
		if !k.Holds("telegram") {
			t.Fatal("one missed renewal must be tolerated: 1010 + 10 < 1030")
		}

		time.Sleep(10 * time.Second) // 1020: the next tick would be at the deadline
		if k.Holds("telegram") {
			t.Fatal("still holding at 1020 after two missed renewals; a peer may start at 1040")
		}
		if _, ok := k.Term("telegram"); !ok {
			t.Fatal("the record must stay: the store may be the one that is unreachable")
		}
	})
}

func TestHoldEndsExactlyOneRenewIntervalBeforeTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := newKeeper(memstore.New(memstore.Options{}), "A")
		mustAcquire(t, k, "job")
		time.Sleep(timing.TTL - timing.RenewEvery - time.Millisecond)
		if !k.Holds("job") {
			t.Fatal("released the hold 1ms early")
		}
		time.Sleep(time.Millisecond)
		if k.Holds("job") {
			t.Fatal("still holding at deadline − RenewEvery")
		}
	})
}

func TestARejectedRenewalDropsTheHoldAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		k := newKeeper(st, "A")
		res := mustAcquire(t, k, "telegram")
		// A peer took the row over with a newer epoch.
		st.Put(store.Lease{Key: "telegram", Owner: "B", Epoch: res.Epoch + 1, TimeLeft: timing.TTL})

		out, err := k.RenewAll(context.Background(), nil)
		if err != nil || out["telegram"] != hold.Lost {
			t.Fatalf("renewal after a takeover: %v, %v; want lost", out, err)
		}
		if k.Holds("telegram") {
			t.Fatal("holds a lease the store refused")
		}
		if _, ok := k.Term("telegram"); ok {
			t.Fatal("a lost term must be forgotten so it is never released")
		}
	})
}

func TestARenewalRepliedLateNeverMovesTheDeadlinePastSendTimePlusTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		k := newKeeper(st, "A")
		mustAcquire(t, k, "job")
		time.Sleep(timing.RenewEvery)
		sent := time.Now()
		// The store takes 4s to answer (within the 5s call timeout).
		st.SetFault(func(op string) error {
			if op == memstore.OpRenew {
				time.Sleep(4 * time.Second)
			}
			return nil
		})
		out, err := k.RenewAll(context.Background(), nil)
		if err != nil || out["job"] != hold.Renewed {
			t.Fatalf("slow renewal: %v, %v", out, err)
		}
		term, _ := k.Term("job")
		if want := sent.Add(timing.TTL); !term.Deadline.Equal(want) {
			t.Fatalf("deadline %v after the reply, want send time + TTL = %v", term.Deadline.Sub(sent), timing.TTL)
		}
	})
}

// commitLate is a store whose renewals commit after the caller gave up:
// the statement runs, but the reply comes after the call timeout.
type commitLate struct {
	*memstore.Store
	delay time.Duration
}

func (c commitLate) Renew(_ context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	time.Sleep(c.delay)
	return c.Store.Renew(context.Background(), owner, ttl, items)
}

func TestARenewalThatCommitsAfterItsTimeoutLeavesTheKeyNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New(memstore.Options{})
		k := newKeeper(commitLate{mem, timing.CallTimeout + time.Second}, "A")
		granted := time.Now()
		mustAcquire(t, k, "job")
		time.Sleep(timing.RenewEvery)
		start := time.Now()
		out, err := k.RenewAll(context.Background(), nil)
		if out["job"] != hold.Unconfirmed || !errors.Is(err, hold.ErrCallTimeout) {
			t.Fatalf("renewal that answered after the timeout: %v, %v; want unconfirmed, ErrCallTimeout", out, err)
		}
		if took := time.Since(start); took != timing.CallTimeout {
			t.Fatalf("the call returned after %v, want exactly the %v timeout", took, timing.CallTimeout)
		}
		time.Sleep(time.Second) // the late commit lands in the store
		synctest.Wait()
		// Had the late commit counted, the deadline would be 10s + TTL and
		// the key still held at 20s.
		time.Sleep(time.Until(granted.Add(2 * timing.RenewEvery)))
		if k.Holds("job") {
			t.Fatal("a renewal committed after its timeout must not count: the key is held only on confirmed renewals")
		}
		leases, _ := mem.List(context.Background(), "")
		if len(leases) != 1 || !leases[0].Live {
			t.Fatalf("the store did commit the late renewals: %+v", leases)
		}
	})
}

// hangs is a store whose every call blocks, ignoring ctx, until released.
type hangs struct {
	*memstore.Store
	release chan struct{}
}

func (h hangs) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	<-h.release
	return h.Store.Acquire(ctx, req)
}

func TestAStoreThatIgnoresItsContextCannotStallACallPastTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hangs{memstore.New(memstore.Options{}), make(chan struct{})}
		defer close(h.release)
		k := newKeeper(h, "A")
		start := time.Now()
		_, err := k.Acquire(context.Background(), "job", false)
		if !errors.Is(err, hold.ErrCallTimeout) || time.Since(start) != timing.CallTimeout {
			t.Fatalf("acquire against a hung store: %v after %v", err, time.Since(start))
		}
		if k.Holds("job") {
			t.Fatal("an unconfirmed acquisition must not hold")
		}
	})
}

func TestARefusedAcquisitionReportsTheHolderAndRetriesAtExpiryPlusGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(st, "B")
		mustAcquire(t, a, "job")
		time.Sleep(7 * time.Second)
		res, err := b.Acquire(context.Background(), "job", false)
		if err != nil || res.OK {
			t.Fatalf("peer acquisition of a live lease: %+v, %v", res, err)
		}
		if res.Holder.Owner != "A" || !res.Holder.Live {
			t.Fatalf("holder %+v, want A live", res.Holder)
		}
		if want := time.Now().Add(timing.TTL - 7*time.Second + timing.Grace); !res.RetryAt.Equal(want) {
			t.Fatalf("retry at +%v, want +%v (expiry + grace)", time.Until(res.RetryAt), time.Until(want))
		}
		if b.LeaderOf("job") != "A" || !b.PeerLeads("job") {
			t.Fatalf("B should see A leading: leader %q", b.LeaderOf("job"))
		}

		time.Sleep(time.Until(res.RetryAt))
		got, err := b.Acquire(context.Background(), "job", false)
		if err != nil || !got.OK || !got.New {
			t.Fatalf("acquisition at expiry + grace: %+v, %v", got, err)
		}
	})
}

func TestAReleasedLeaseCanBeTakenAtOnceAndIsNotRenewedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(st, "B")
		res := mustAcquire(t, a, "job")
		term, _ := a.Term("job")
		if err := a.Release(context.Background(), term); err != nil {
			t.Fatal(err)
		}
		if out, _ := a.RenewAll(context.Background(), nil); len(out) != 0 {
			t.Fatalf("released terms were renewed: %v", out)
		}
		got := mustAcquire(t, b, "job")
		if got.Epoch <= res.Epoch {
			t.Fatalf("new epoch %d not above released %d", got.Epoch, res.Epoch)
		}
	})
}

func TestObservingTheTableReportsPeersIncludingUnconfiguredKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(st, "B")
		mustAcquire(t, a, "telegram")
		mustAcquire(t, a, "ui-connected")
		mustAcquire(t, b, "discord")
		if err := b.ObserveAll(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		if got := b.PeerKeys(); len(got) != 2 || got[0] != "telegram" || got[1] != "ui-connected" {
			t.Fatalf("peer keys %v", got)
		}
		if b.LeaderOf("discord") != "B" || b.PeerLeads("discord") {
			t.Fatal("B's own key reported as a peer's")
		}
		// An observation ages with the local clock: once it must have
		// expired, it no longer names a leader.
		time.Sleep(timing.TTL)
		if b.LeaderOf("telegram") != "" {
			t.Fatalf("a lease observed %v ago still reported live", timing.TTL)
		}
	})
}

func TestAPeerRefusedWithinGraceRetriesAtExpiryPlusGraceNotAGraceLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(st, "B")
		mustAcquire(t, a, "job")
		time.Sleep(timing.TTL + 3*time.Second) // expired 3s ago, within grace
		res, err := b.Acquire(context.Background(), "job", false)
		if err != nil || res.OK {
			t.Fatalf("acquisition within grace: %+v, %v", res, err)
		}
		if got, want := time.Until(res.RetryAt), timing.Grace-3*time.Second; got != want {
			t.Fatalf("retry in %v, want %v (expiry + grace)", got, want)
		}
	})
}

func TestAfterReleasingOrLosingAKeyTheKeeperNoLongerNamesItselfLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		k := newKeeper(st, "A")
		mustAcquire(t, k, "released")
		res := mustAcquire(t, k, "lost")
		if err := k.ObserveAll(context.Background(), ""); err != nil { // the table shows A on both
			t.Fatal(err)
		}
		term, _ := k.Term("released")
		if err := k.Release(context.Background(), term); err != nil {
			t.Fatal(err)
		}
		st.Put(store.Lease{Key: "lost", Owner: "B", Epoch: res.Epoch + 1, TimeLeft: timing.TTL})
		k.RenewAll(context.Background(), nil)
		if got := k.LeaderOf("released"); got != "" {
			t.Errorf("leader of a released key: %q", got)
		}
		if got := k.LeaderOf("lost"); got == "A" {
			t.Errorf("leader of a lost key: %q", got)
		}
	})
}

// lateFirst delays the reply to the first acquisition of each test until
// release is closed, after the store has done it, so that a later call's
// reply arrives first.
type lateFirst struct {
	store.Store
	first   chan struct{} // closed when the first call has reached the store
	release chan struct{}
	n       int
	granted store.AcquireResult // what the store answered the first call
}

func (l *lateFirst) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	res, err := l.Store.Acquire(ctx, req)
	l.n++
	if l.n == 1 {
		l.granted = res
		close(l.first)
		<-l.release
	}
	return res, err
}

// Replies to acquisitions can arrive out of order; a late reply naming an
// older term must never replace the newer term already installed, nor drop
// it, or the runner is stopped with a lost lease nobody else holds.
func TestALateAcquireReplyNeverReplacesANewerTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &lateFirst{Store: memstore.New(memstore.Options{}), first: make(chan struct{}), release: make(chan struct{})}
		k := newKeeper(st, "A")
		late := make(chan hold.Acquired)
		go func() {
			res, _ := k.Acquire(context.Background(), "telegram", true)
			late <- res
		}()
		<-st.first // the first term is granted; its reply is held back
		newer := mustAcquire(t, k, "telegram")
		close(st.release)
		old := <-late
		if !(st.granted.Epoch < newer.Epoch) {
			t.Fatalf("epochs %d then %d: the store did not start a newer term", st.granted.Epoch, newer.Epoch)
		}
		if !old.OK || old.New || old.Epoch != newer.Epoch {
			t.Fatalf("the late reply reported %+v, want the term held now (epoch %d)", old, newer.Epoch)
		}
		if term, _ := k.Term("telegram"); term.Epoch != newer.Epoch {
			t.Fatalf("the late reply installed epoch %d over the newer %d", term.Epoch, newer.Epoch)
		}
		if out, err := k.RenewAll(context.Background(), nil); err != nil || out["telegram"] != hold.Renewed {
			t.Fatalf("renewal after a late reply: %v, %v; want renewed", out, err)
		}
	})
}

// A refusal sent while a peer held the key, and answered after this
// replica took the key's newer term, says nothing about the newer term.
func TestALateRefusalNeverDropsANewerTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New(memstore.Options{})
		mem.Put(store.Lease{Key: "telegram", Owner: "B", Epoch: 5, TimeLeft: time.Minute})
		st := &lateFirst{Store: mem, first: make(chan struct{}), release: make(chan struct{})}
		k := newKeeper(st, "A")
		late := make(chan hold.Acquired)
		go func() {
			res, _ := k.Acquire(context.Background(), "telegram", true)
			late <- res
		}()
		<-st.first // refused: B holds epoch 5; the reply is held back
		mem.Put(store.Lease{Key: "telegram", Owner: "B", Epoch: 5, Released: true})
		newer := mustAcquire(t, k, "telegram")
		close(st.release)
		if res := <-late; res.OK && res.Epoch != newer.Epoch || res.New {
			t.Fatalf("the late refusal reported %+v, want a refusal or the term held now", res)
		}
		if term, ok := k.Term("telegram"); !ok || term.Epoch != newer.Epoch || !k.Holds("telegram") {
			t.Fatalf("after a late refusal the keeper holds %+v (%v), want epoch %d", term, ok, newer.Epoch)
		}
	})
}

// ObservedUnnumberedWhere picks leases as Observed would return them (aged), leaves
// out the keeper's own keys, and ages what it returns like Observed.
func TestObservedUnnumberedWherePicksPeersLeasesAndAgesThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		a, b := newKeeper(st, "A"), newKeeper(st, "B")
		ea := mustAcquire(t, a, "released").Epoch
		if err := a.Release(context.Background(), hold.Term{Key: "released", Epoch: ea}); err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, a, "live")
		mustAcquire(t, b, "mine")
		if err := b.ObserveAll(context.Background(), ""); err != nil {
			t.Fatal(err)
		}
		all := func(store.Lease) bool { return true }
		keys := func(ls []store.Lease) map[string]store.Lease {
			m := map[string]store.Lease{}
			for _, l := range ls {
				m[l.Key] = l
			}
			return m
		}
		if got := keys(b.ObservedUnnumberedWhere(all)); len(got) != 2 || got["mine"].Key != "" {
			t.Fatalf("ObservedUnnumberedWhere(all) = %v, want the two peer leases, not B's own", got)
		}
		if got := b.ObservedUnnumberedWhere(func(l store.Lease) bool { return l.Released }); len(got) != 1 || got[0].Key != "released" {
			t.Fatalf("ObservedUnnumberedWhere(released) = %v", got)
		}
		time.Sleep(timing.TTL / 2)
		live := keys(b.ObservedUnnumberedWhere(all))["live"]
		if want, _ := b.Observed("live"); live != want || live.TimeLeft > timing.TTL/2 {
			t.Errorf("ObservedUnnumberedWhere gave %+v, Observed %+v: want the same lease, aged by %v", live, want, timing.TTL/2)
		}
	})
}

// datingStore dates every grant back by elapsed (as etcd does when its
// session was found alive that long before), and keeps the MaxElapsed it
// was last asked with.
type datingStore struct {
	store.Store
	elapsed time.Duration
	asked   time.Duration
}

func (d *datingStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	d.asked = req.MaxElapsed
	res, err := d.Store.Acquire(ctx, req)
	if res.Acquired {
		res.Elapsed = d.elapsed
	}
	return res, err
}

// A grant dated back counts its deadline from then, and the keeper lets a
// store date it back only so far that the term is still held when its
// first renewal, sent within RenewEvery, answers within CallTimeout.
func TestAGrantDatedBackCountsItsDeadlineFromThen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &datingStore{Store: memstore.New(memstore.Options{}), elapsed: 3 * time.Second}
		k := newKeeper(st, "A")
		sent := time.Now()
		mustAcquire(t, k, "job")
		if want := timing.TTL - 2*timing.RenewEvery - timing.CallTimeout; st.asked != want {
			t.Fatalf("asked the store for MaxElapsed %v, want TTL - 2·RenewEvery - CallTimeout = %v", st.asked, want)
		}
		term, _ := k.Term("job")
		if want := sent.Add(timing.TTL - st.elapsed); !term.Deadline.Equal(want) {
			t.Fatalf("deadline %v after the send, want TTL - Elapsed = %v", term.Deadline.Sub(sent), timing.TTL-st.elapsed)
		}
		// The worst a store may do: dated back by all it was allowed, the
		// term is still held until its first renewal has had its time.
		time.Sleep(timing.RenewEvery + timing.CallTimeout - time.Millisecond)
		st.elapsed = st.asked
		mustAcquire(t, k, "worst")
		if !k.HoldsAt("worst", time.Now().Add(timing.RenewEvery+timing.CallTimeout-time.Millisecond)) {
			t.Fatal("a grant dated back by MaxElapsed is not held until its first renewal answers")
		}
	})
}
