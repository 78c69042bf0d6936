package etcd

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// getKV reads one etcd key, nil when it is absent.
func getKV(t *testing.T, s *Store, etcdKey string) (value string, createRev int64, ok bool) {
	t.Helper()
	resp, err := s.client.Get(testenv.Context(t), etcdKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, false
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].CreateRevision, true
}

// implicitTerm acquires key for owner after a first key has made owner's
// session, so that the acquisition takes one transaction, and checks that
// the term's keys name it by their create revision.
func implicitTerm(t *testing.T, s *Store, key, owner string) int64 {
	t.Helper()
	testenv.MustAcquire(t, s, "warm-"+key, owner, time.Minute, time.Second)
	epoch := testenv.MustAcquire(t, s, key, owner, time.Minute, time.Second)
	rec, recRev, _ := getKV(t, s, s.recordKey(key))
	live, liveRev, _ := getKV(t, s, s.liveKey(key))
	if !strings.HasPrefix(rec, "0\t"+owner+"\t") || live != liveValue(0, owner) || recRev != epoch || liveRev != epoch {
		t.Fatalf("after a one-transaction acquisition of epoch %d: record %q created at %d, live key %q created at %d; want both written with 0 and created at the epoch",
			epoch, rec, recRev, live, liveRev)
	}
	return epoch
}

// A free key costs one transaction and the session's keep-alive, as a
// mutex's TryLock costs one transaction: no read first.
func TestAFreeKeyIsClaimedInOneTransaction(t *testing.T) {
	s, calls := countingStore(t)
	testenv.MustAcquire(t, s, "first", "a", time.Minute, time.Second)
	from := calls.Load()
	epoch := testenv.MustAcquire(t, s, "second", "a", time.Minute, time.Second)
	if got := calls.Load() - from; got != 2 {
		t.Errorf("acquiring a free key took %d calls, want 2 (a transaction and a keep-alive)", got)
	}
	_, created, _ := getKV(t, s, s.recordKey("second"))
	if epoch != created {
		t.Errorf("epoch %d, want the record's create revision %d", epoch, created)
	}
	if l := testenv.LeaseOf(t, s, "second"); l.Epoch != epoch || !l.Live || l.Owner != "a" {
		t.Errorf("List shows %+v, want a's live term of epoch %d", l, epoch)
	}
	// A key that has a record is read by that transaction, not again.
	from = calls.Load()
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: "second", Owner: "b", TTL: time.Minute})
	if err != nil || res.Acquired || res.Holder.Epoch != epoch {
		t.Fatalf("b acquiring a's key = %+v, %v; want refused, holder of epoch %d", res, err, epoch)
	}
	if got := calls.Load() - from; got > 4 {
		t.Errorf("a refused acquisition took %d calls, want the read, the holder's lease TTL and at most the session's grant and keep-alive", got)
	}
}

// An epoch that is a create revision is above every epoch the key had,
// even once its records are gone.
func TestImplicitEpochsOutliveADeletedNamespace(t *testing.T) {
	s := newTestStore(t)
	e := implicitTerm(t, s, "job", "a")
	if _, err := s.client.Delete(testenv.Context(t), s.root, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	next := implicitTerm(t, s, "job", "a")
	if next <= e {
		t.Fatalf("epoch after the namespace was deleted: %d, want > %d", next, e)
	}
	// Both terms' keys read "0" and "a": the create revision alone tells
	// them apart, for a release and for an eviction of the old one.
	if err := s.Release(testenv.Context(t), "a", []store.Term{{Key: "job", Epoch: e}}); err != nil {
		t.Fatal(err)
	}
	sess := s.lookupSession("a", 60, 1)
	s.evict(testenv.Context(t), sess, "a", []string{"job"}, []member{{epoch: e, implicit: true}}, 0)
	if l := testenv.LeaseOf(t, s, "job"); !l.Live || l.Epoch != next {
		t.Fatalf("after a release and an eviction of epoch %d: %+v, want the term of epoch %d live", e, l, next)
	}
	if ok := testenv.Renew(t, s, "a", time.Minute, store.RenewItem{Key: "job", Epoch: next}); !ok[0] {
		t.Fatalf("the term of epoch %d was lost to the release or eviction of epoch %d", next, e)
	}
}

// An implicit term is renewed, flagged, moved and released like any
// other, by the store that acquired it or by another one.
func TestAnImplicitTermLivesAndEndsLikeAnyOther(t *testing.T) {
	s := newTestStore(t)
	epoch := implicitTerm(t, s, "job", "a")
	item := store.RenewItem{Key: "job", Epoch: epoch, Running: false}
	if ok := testenv.Renew(t, s, "a", time.Minute, item); !ok[0] {
		t.Fatal("renewing the term with a new running flag was refused")
	}
	if rec, _, _ := getKV(t, s, s.recordKey("job")); !strings.HasPrefix(rec, "0\ta\theld\t0\t") {
		t.Fatalf("record after the running flag changed: %q, want still implicit and not running", rec)
	}
	// Another store of the same owner knows no session member: it reads
	// the term and moves it onto a session of its own.
	other := anotherStore(t, s)
	for n := range 2 {
		if ok := testenv.Renew(t, other, "a", time.Minute, item); !ok[0] {
			t.Fatalf("renewal %d by another store was refused", n)
		}
	}
	if ok := testenv.Renew(t, other, "a", time.Minute, store.RenewItem{Key: "job", Epoch: 0}); ok[0] {
		t.Fatal("a renewal of epoch 0 was granted: 0 must not name an implicit term")
	}
	if err := other.Release(testenv.Context(t), "a", []store.Term{{Key: "job", Epoch: 0}}); err != nil {
		t.Fatal(err)
	}
	if l := testenv.LeaseOf(t, s, "job"); !l.Live || l.Epoch != epoch {
		t.Fatalf("after a release of epoch 0: %+v, want the term of epoch %d still live", l, epoch)
	}
	third := anotherStore(t, s)
	if err := third.Release(testenv.Context(t), "a", []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
		t.Fatal(err)
	}
	if l := testenv.LeaseOf(t, s, "job"); !l.Released || l.Epoch != epoch {
		t.Fatalf("after its release: %+v, want released at epoch %d", l, epoch)
	}
	if next := testenv.MustAcquire(t, s, "job", "b", time.Minute, time.Second); next <= epoch {
		t.Fatalf("b's epoch %d, want above %d", next, epoch)
	}
}

// A revocation fences an implicit term: the holder's renewals are refused
// and the next epoch is higher.
func TestARevokedImplicitTermIsFenced(t *testing.T) {
	s := newTestStore(t)
	epoch := implicitTerm(t, s, "job", "a")
	if ok, err := s.Revoke(testenv.Context(t), "job"); err != nil || !ok {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if ok := testenv.Renew(t, s, "a", time.Minute, store.RenewItem{Key: "job", Epoch: epoch}); ok[0] {
		t.Fatal("the revoked term was renewed")
	}
	if l := testenv.LeaseOf(t, s, "job"); l.Epoch <= epoch || l.Live {
		t.Fatalf("after the revocation: %+v, want not live, epoch above %d", l, epoch)
	}
}

// A term of the key that the owner held before, still a member of its
// session (its records were deleted), must not be renewed on the strength
// of the new term's live key, even in the moment between the new term's
// write and its joining the session.
func TestAnOldMemberIsNotRenewedByTheNewTermsLiveKey(t *testing.T) {
	s := newTestStore(t)
	var o *Store
	var old int64
	var renewedOld atomic.Bool
	o = storeWith(t, s, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := req.(*etcdserverpb.TxnRequest); ok && old != 0 && len(r.Success) == 3 && !renewedOld.Load() {
			// The new term is written and not joined yet: renew the old.
			ok, rerr := o.Renew(ctx, "a", time.Minute, []store.RenewItem{{Key: "job", Epoch: old, Running: true}})
			renewedOld.Store(rerr == nil && ok[0])
		}
		return err
	})
	old = implicitTerm(t, o, "job", "a")
	if _, err := s.client.Delete(testenv.Context(t), s.root+"job\x00", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	testenv.MustAcquire(t, o, "job", "a", time.Minute, time.Second)
	if renewedOld.Load() {
		t.Fatalf("the old term %d was renewed by the new term's live key", old)
	}
}

// A record deleted by hand ends an implicit term at its holder's next
// write: the write must not create a record whose create revision would
// name another epoch.
func TestAnImplicitTermWhoseRecordWasDeletedIsNotWrittenBack(t *testing.T) {
	s := newTestStore(t)
	e := implicitTerm(t, s, "job", "a") // running
	if _, err := s.client.Delete(testenv.Context(t), s.recordKey("job")); err != nil {
		t.Fatal(err)
	}
	if ok := testenv.Renew(t, s, "a", time.Minute, store.RenewItem{Key: "job", Epoch: e, Running: false}); ok[0] {
		t.Error("a renewal that writes the running flag kept a term whose record is gone")
	}
	if rec, created, ok := getKV(t, s, s.recordKey("job")); ok {
		t.Fatalf("the renewal wrote the record back: %q created at %d (the term's epoch is %d)", rec, created, e)
	}
}

// A term's live key left without its record (deleted by hand) still keeps
// peers out: they see the term it names.
func TestALiveKeyWithoutItsRecordKeepsPeersOut(t *testing.T) {
	s := newTestStore(t)
	testenv.MustAcquire(t, s, "warm", "b", time.Minute, time.Second) // b claims in one transaction
	explicit := testenv.MustAcquire(t, s, "first", "a", time.Minute, time.Second)
	implicit := implicitTerm(t, s, "second", "a")
	for key, epoch := range map[string]int64{"first": explicit, "second": implicit} {
		if _, err := s.client.Delete(testenv.Context(t), s.recordKey(key)); err != nil {
			t.Fatal(err)
		}
		res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: key, Owner: "b", TTL: time.Minute, Grace: time.Second})
		if err != nil || res.Acquired {
			t.Fatalf("b acquiring %s, whose holder's live key is left = %+v, %v; want refused", key, res, err)
		}
		if h := res.Holder; h.Owner != "a" || h.Epoch != epoch || !h.Live {
			t.Errorf("b was refused %s by %+v, want a's live term of epoch %d", key, h, epoch)
		}
	}
	// The holder itself may start a new term over its live key.
	if again := testenv.MustAcquire(t, s, "second", "a", time.Minute, time.Second); again <= implicit {
		t.Fatalf("a's new term of second has epoch %d, want above %d", again, implicit)
	}
	// A revoked term keeps peers out by its grace key alone.
	revoked := implicitTerm(t, s, "third", "a")
	if ok, err := s.Revoke(testenv.Context(t), "third"); err != nil || !ok {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if _, err := s.client.Delete(testenv.Context(t), s.recordKey("third")); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(testenv.Context(t), store.AcquireRequest{Key: "third", Owner: "b", TTL: time.Minute, Grace: time.Second})
	if err != nil || res.Acquired || res.Holder.Epoch != revoked {
		t.Fatalf("b acquiring a revoked key whose grace key is left = %+v, %v; want refused by epoch %d", res, err, revoked)
	}
}
