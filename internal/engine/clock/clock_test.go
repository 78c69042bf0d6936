package clock_test

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/clock"
)

// Without a suspend, the clock is time.Now(): reading two clocks one after
// the other must not move it by their jitter.
func TestWithoutASuspendNowIsTimeNow(t *testing.T) {
	for range 10000 {
		if d := clock.Suspended(); d != 0 {
			t.Fatalf("Suspended() = %v on a host that did not sleep", d)
		}
	}
	before := time.Now()
	now := clock.Now()
	if now.Before(before) || now.Sub(before) > time.Second {
		t.Fatalf("Now() = %v, time.Now() = %v", now, before)
	}
}

// BenchmarkReading compares what the engine pays for a reading of the
// time the host has slept (two clock system calls) with time.Now (vDSO):
// why a loop over many keys reads Suspended once, not per key.
//
//	go test -run '^$' -bench Reading ./internal/engine/clock/
func BenchmarkReading(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("Suspended", func(b *testing.B) {
		for b.Loop() {
			_ = clock.Suspended()
		}
	})
}
