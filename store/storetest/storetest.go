// Package storetest is the conformance suite every lease store must pass.
//
// A backend's test calls [Run] with a [Harness] that makes fresh, isolated
// stores (a new table or namespace per call) and says how time passes for
// the store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			New:     func(t *testing.T) store.Store { return newIsolatedStore(t) },
//			Advance: storetest.Sleep, // a real server's clock
//		})
//	}
//
// Every TTL in the suite is a multiple of [Harness.Unit] (terms of 4 units,
// grace of 2), so a store on a real server runs it in about 15 seconds.
// Optional powers are tested when the store has them: [store.Watcher],
// [store.Revoker] and, through [Harness.LockKey], row locks.
//
// The randomized subtest logs its seed; TENURE_STORETEST_SEED=<seed>
// replays it, and a failure prints the last steps that led to it.
package storetest

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Harness tells the suite how to drive one backend.
type Harness struct {
	// New returns an empty store isolated from every other store New
	// returned (its own table, namespace or file). It registers its own
	// cleanup with t.Cleanup.
	New func(t *testing.T) store.Store

	// Advance lets d pass on the store's clock. Stores on a real server pass
	// [Sleep]; an in-memory store with an injected clock moves it.
	Advance func(t *testing.T, s store.Store, d time.Duration)

	// Unit is the time scale for TTLs and grace periods in the suite:
	// small for an injected clock, large enough to dwarf a round trip for a
	// real server. Zero means 200ms.
	Unit time.Duration

	// LockKey, when set, holds a write lock on key's record (for example a
	// SELECT … FOR UPDATE in an open transaction) until the returned func is
	// called. The suite uses it to show that a renewal blocked behind the
	// lock stamps its expiry after the wait. Stores without row locks leave
	// it nil and the test is skipped.
	LockKey func(t *testing.T, s store.Store, key string) (unlock func())

	// Tolerance is how far a time left the suite reads may stray from the
	// value it expects, beyond the time it measured passing (clock
	// resolution, scheduling, a server clock slewed by NTP). Zero means
	// Unit/4.
	Tolerance time.Duration

	// InstantAdvance says Advance moves an injected clock and costs no wall
	// time, so the randomized test may let much more store time pass. Its
	// own clock is then the sum of the advances instead of the wall clock.
	InstantAdvance bool

	// SharedExpiry says an owner's terms share one expiry that any of the
	// owner's calls may extend (etcd's sessions): a term its owner stops
	// renewing, without releasing it, may then stay live and keep peers
	// out for a while after its deadline, as long as the owner's other
	// terms are renewed. The randomized test then does not judge how soon
	// such a term ends — only that it never ends early; the store's own
	// tests must bound it.
	SharedExpiry bool

	// Operations is the length of the randomized test. Zero means 2000
	// with InstantAdvance and 1000 otherwise, a few seconds on a local
	// server.
	Operations int
}

// Sleep is the Advance of stores whose clock is a real server's.
func Sleep(t *testing.T, _ store.Store, d time.Duration) {
	t.Helper()
	time.Sleep(d)
}
