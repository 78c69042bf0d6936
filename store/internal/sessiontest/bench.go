package sessiontest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// BenchHarness tells BenchRenewOnASession how to drive one store.
type BenchHarness struct {
	// Open returns a Store on a new, empty table holding n live terms of
	// storetest.BenchOwner, of an hour or more, and their renewal items.
	Open func(b *testing.B, n int) (store.Store, []store.RenewItem)
	// OffSessions puts every record of s back on its own, live for an
	// hour, and makes s forget its sessions: the state before a first
	// renewal.
	OffSessions func(b *testing.B, s store.Store)
	// More are the store's own measurements (its session write alone, the
	// per-record renewal of before, …), run in order after the steady
	// renewal, which leaves the terms on the session.
	More []BenchStep
}

// BenchStep is one of a store's own measurements.
type BenchStep struct {
	Name string
	Run  func(b *testing.B, s store.Store, items []store.RenewItem)
}

// BenchRenewOnASession is a process's steady renewal of 10,000 and of
// 100,000 terms on its session, timed apart from the first renewal, which
// puts the terms on the session term by term, and beside the store's own
// measurements (BENCHMARKS.md, "Store: a renewal on a session").
func BenchRenewOnASession(b *testing.B, h BenchHarness) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s, items := h.Open(b, n)
			renew := func(b *testing.B) {
				ok, err := s.Renew(context.Background(), storetest.BenchOwner, time.Hour, items)
				if err != nil || !ok[0] || !ok[n-1] {
					b.Fatalf("Renew: %v %v", ok[:1], err)
				}
			}
			b.Run("first, onto the session", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					h.OffSessions(b, s)
					b.StartTimer()
					renew(b)
				}
			})
			b.Run("Store.Renew on the session", func(b *testing.B) {
				renew(b)
				for b.Loop() {
					renew(b)
				}
			})
			for _, step := range h.More {
				b.Run(step.Name, func(b *testing.B) { step.Run(b, s, items) })
			}
		})
	}
}
