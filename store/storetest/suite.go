package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Run runs the conformance suite: one subtest per behaviour of the store
// contract, each on a fresh store from h.New. Run a single one with
// -run 'TestConformance/ReleasedKeyCanBeTakenAtOnce'.
//
// On a real clock (InstantAdvance false) the subtests spend their time
// waiting for it, so most of them run in parallel with each other (up to
// go test's -parallel); Harness.New and Advance must then be safe for
// concurrent use. The subtests that hold a lock through Harness.LockKey,
// which may reach beyond one record, and the randomized one, which judges
// answers to within a tolerance, run alone.
//
// The randomized test logs its seed; set TENURE_STORETEST_SEED to replay it.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.Advance == nil {
		t.Fatal("storetest: Harness.New and Harness.Advance are required")
	}
	c := newSuite(h)
	type test struct {
		name string
		fn   func(*testing.T)
	}
	// Subtests that must run alone.
	alone := []test{
		// lock.go
		{"RenewalBlockedByALockStampsExpiryAfterTheWait", c.testRenewalBlockedByALockStampsExpiryAfterTheWait},
		{"RenewalThatWaitsPastTheExpiryIsLost", c.testRenewalThatWaitsPastTheExpiryIsLost},
		{"TakeoverBlockedByALockStampsExpiryAfterTheWait", c.testTakeoverBlockedByALockStampsExpiryAfterTheWait},
		{"RenewalBlockedPastItsDeadlineFails", c.testRenewalBlockedPastItsDeadlineFails},
		// property.go
		{"RandomOperationsKeepEveryGuarantee", c.testRandomOperationsKeepEveryGuarantee},
	}
	tests := []test{
		// acquire.go
		{"FreeKeyIsGrantedAndPeersSeeTheHolder", c.testFreeKeyIsGrantedAndPeersSeeTheHolder},
		{"ExpiredTermBlocksPeersUntilGraceHasPassed", c.testExpiredTermBlocksPeersUntilGraceHasPassed},
		{"OwnerReacquiringStartsANewTerm", c.testOwnerReacquiringStartsANewTerm},
		{"ConcurrentAcquisitionsGrantExactlyOne", c.testConcurrentAcquisitionsGrantExactlyOne},
		{"ConcurrentTakeoversGrantExactlyOne", c.testConcurrentTakeoversGrantExactlyOne},
		{"KeysAreByteExact", c.testKeysAreByteExact},
		{"LongestKeysAndOwnersAreKept", c.testLongestKeysAndOwnersAreKept},
		{"InvalidInputIsRejected", c.testInvalidInputIsRejected},
		{"DoneContextNeverSucceeds", c.testDoneContextNeverSucceeds},
		{"ADatedTermKeepsItsPromise", c.testADatedTermKeepsItsPromise},
		// renew.go
		{"RenewalExtendsTheTerm", c.testRenewalExtendsTheTerm},
		{"RenewalOfAnotherEpochIsLost", c.testRenewalOfAnotherEpochIsLost},
		{"RenewalAfterAPeersTakeoverIsLost", c.testRenewalAfterAPeersTakeoverIsLost},
		{"RenewalOfAnExpiredTermIsLost", c.testRenewalOfAnExpiredTermIsLost},
		{"BatchedRenewalAnswersEachItemInOrder", c.testBatchedRenewalAnswersEachItemInOrder},
		{"RunningFlagIsRecorded", c.testRunningFlagIsRecorded},
		{"EmptyBatchesAreNoOps", c.testEmptyBatchesAreNoOps},
		{"RenewalListingATermTwiceAnswersEveryItem", c.testRenewalListingATermTwiceAnswersEveryItem},
		// release.go
		{"ReleasedKeyCanBeTakenAtOnce", c.testReleasedKeyCanBeTakenAtOnce},
		{"ReleasingAnExpiredTermFreesItAtOnce", c.testReleasingAnExpiredTermFreesItAtOnce},
		{"ReleasingAnotherTermChangesNothing", c.testReleasingAnotherTermChangesNothing},
		{"ReleaseEndsSeveralTermsInOneCall", c.testReleaseEndsSeveralTermsInOneCall},
		{"EpochsKeepGrowingAcrossReleasesAndExpiries", c.testEpochsKeepGrowingAcrossReleasesAndExpiries},
		{"ReleaseListingOldAndCurrentTermsEndsTheCurrentOne", c.testReleaseListingOldAndCurrentTermsEndsTheCurrentOne},
		// list.go
		{"ListFiltersByPrefixAndSortsByBytes", c.testListFiltersByPrefixAndSortsByBytes},
		{"ListTreatsPrefixLiterally", c.testListTreatsPrefixLiterally},
		{"ListPrefixesMayEndInsideACharacter", c.testListPrefixesMayEndInsideACharacter},
		{"ListShowsEveryFieldOnTheStoresClock", c.testListShowsEveryFieldOnTheStoresClock},
		{"WatchReportsReleasesUntilCancelled", c.testWatchReportsReleasesUntilCancelled},
		{"RevokeFencesTheHolderAndFreesTheKeyAfterExpiryPlusGrace", c.testRevokeFencesTheHolderAndFreesTheKeyAfterExpiryPlusGrace},
		// prune.go
		{"PruneDeletesDeadRecordsAndEpochsStillGrow", c.testPruneDeletesDeadRecordsAndEpochsStillGrow},
		{"PruneRejectsAnAgeUnderAMillisecond", c.testPruneRejectsAnAgeUnderAMillisecond},
		{"PruneRacingAcquisitionsNeverRepeatsAnEpoch", c.testPruneRacingAcquisitionsNeverRepeatsAnEpoch},
		// closed.go
		{"ClosedStoreRefusesEveryCall", c.testClosedStoreRefusesEveryCall},
	}
	// The parallel subtests wait until the test that called Run returns,
	// so the ones below run first, alone.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !h.InstantAdvance {
				t.Parallel()
			}
			tt.fn(t)
		})
	}
	for _, tt := range alone {
		t.Run(tt.name, tt.fn)
	}
}

// suite carries the time scale shared by every test.
type suite struct {
	h     Harness
	unit  time.Duration
	ttl   time.Duration // 4 units: long enough to renew within
	grace time.Duration // 2 units
	tol   time.Duration
	// callTimeout bounds every store call, so a hung backend fails the
	// test instead of stalling the whole run.
	callTimeout time.Duration
}

func newSuite(h Harness) *suite {
	c := &suite{h: h, unit: h.Unit, tol: h.Tolerance}
	if c.unit <= 0 {
		c.unit = 200 * time.Millisecond
	}
	if c.tol <= 0 {
		c.tol = c.unit / 4
	}
	c.ttl = 4 * c.unit
	c.grace = 2 * c.unit
	c.callTimeout = 20*c.unit + 10*time.Second
	return c
}

func (c *suite) fresh(t *testing.T) store.Store {
	t.Helper()
	s := c.h.New(t)
	if s == nil {
		t.Fatal("Harness.New returned a nil store")
	}
	return s
}

func (c *suite) advance(t *testing.T, s store.Store, d time.Duration) {
	t.Helper()
	c.h.Advance(t, s, d)
}

// ctx bounds one store call.
func (c *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), c.callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (c *suite) request(key, owner string) store.AcquireRequest {
	return store.AcquireRequest{Key: key, Owner: owner, TTL: c.ttl, Grace: c.grace}
}

func (c *suite) acquire(t *testing.T, s store.Store, req store.AcquireRequest) store.AcquireResult {
	t.Helper()
	res, err := s.Acquire(c.ctx(t), req)
	if err != nil {
		t.Fatalf("Acquire(key %q, owner %q): %v", req.Key, req.Owner, err)
	}
	return res
}

// mustAcquire starts a term of key for owner and returns its epoch.
func (c *suite) mustAcquire(t *testing.T, s store.Store, key, owner string) int64 {
	t.Helper()
	res := c.acquire(t, s, c.request(key, owner))
	if !res.Acquired {
		t.Fatalf("Acquire(key %q, owner %q) was refused, holder %s; want a new term", key, owner, fmtLease(res.Holder))
	}
	if res.Epoch < 1 {
		t.Fatalf("Acquire(key %q, owner %q) granted epoch %d; epochs start at 1", key, owner, res.Epoch)
	}
	return res.Epoch
}

// mustBeRefused tries to acquire key for owner and returns the holder that
// blocked it.
func (c *suite) mustBeRefused(t *testing.T, s store.Store, key, owner string) store.Lease {
	t.Helper()
	res := c.acquire(t, s, c.request(key, owner))
	if res.Acquired {
		t.Fatalf("Acquire(key %q, owner %q) granted epoch %d; want it refused", key, owner, res.Epoch)
	}
	return res.Holder
}

func (c *suite) renew(t *testing.T, s store.Store, owner string, items ...store.RenewItem) []bool {
	t.Helper()
	return c.renewFor(t, s, owner, c.ttl, items...)
}

func (c *suite) renewFor(t *testing.T, s store.Store, owner string, ttl time.Duration, items ...store.RenewItem) []bool {
	t.Helper()
	ok, err := s.Renew(c.ctx(t), owner, ttl, items)
	if err != nil {
		t.Fatalf("Renew(owner %q, %v): %v", owner, items, err)
	}
	if len(ok) != len(items) {
		t.Fatalf("Renew(owner %q, %v) returned %d results for %d items", owner, items, len(ok), len(items))
	}
	return ok
}

// renewOne renews one term and reports whether it was renewed.
func (c *suite) renewOne(t *testing.T, s store.Store, owner, key string, epoch int64) bool {
	t.Helper()
	return c.renew(t, s, owner, store.RenewItem{Key: key, Epoch: epoch})[0]
}

func (c *suite) release(t *testing.T, s store.Store, owner string, terms ...store.Term) {
	t.Helper()
	if err := s.Release(c.ctx(t), owner, terms); err != nil {
		t.Fatalf("Release(owner %q, %v): %v", owner, terms, err)
	}
}

func (c *suite) list(t *testing.T, s store.Store, prefix string) []store.Lease {
	t.Helper()
	ls, err := s.List(c.ctx(t), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return ls
}

// lease returns key's record as List shows it.
func (c *suite) lease(t *testing.T, s store.Store, key string) store.Lease {
	t.Helper()
	for _, l := range c.list(t, s, key) {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("List(%q) has no record of key %q", key, key)
	return store.Lease{}
}

// checkTimeLeft checks a TimeLeft read after some store time passed since
// the record was stamped: at least advanced (what the suite let pass with
// Advance) and at most the wall time measured since start, when that is
// larger (a real server's clock runs during the calls too).
func (c *suite) checkTimeLeft(t *testing.T, what string, got, stamped time.Duration, start time.Time, advanced time.Duration) {
	t.Helper()
	extra := max(time.Since(start)-advanced, 0)
	lo, hi := stamped-advanced-extra-c.tol, stamped-advanced+c.tol
	if got < lo || got > hi {
		t.Errorf("%s: TimeLeft %v, want %v (%v…%v: %v stamped, %v advanced, up to %v more measured, tolerance %v)",
			what, got, stamped-advanced, lo, hi, stamped, advanced, extra, c.tol)
	}
}

// checkLease compares the fields of l that want sets explicitly.
func checkLease(t *testing.T, what string, got store.Lease, want store.Lease) {
	t.Helper()
	if got.Key != want.Key || got.Owner != want.Owner || got.Epoch != want.Epoch ||
		got.Live != want.Live || got.Released != want.Released {
		t.Errorf("%s: got %s, want %s", what, fmtLease(got), fmtLease(want))
	}
}

func fmtLease(l store.Lease) string {
	return fmt.Sprintf("{key %q owner %q epoch %d live %t released %t running %t left %v}",
		l.Key, l.Owner, l.Epoch, l.Live, l.Released, l.Running, l.TimeLeft)
}

func term(key string, epoch int64) store.Term { return store.Term{Key: key, Epoch: epoch} }
