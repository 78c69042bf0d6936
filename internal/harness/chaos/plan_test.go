package chaos

import (
	"slices"
	"testing"
	"time"
)

func TestTheFirstStepsDrawEveryEnabledKindOnce(t *testing.T) {
	kinds := []string{FaultSameOwner, FaultLogStall, FaultKill, FaultSlowStore}
	p := newPlanner(9, DefaultTiming(), 4, kinds)
	var first []string
	for range len(kinds) {
		first = append(first, p.next().Fault)
	}
	slices.Sort(first)
	want := slices.Clone(kinds)
	slices.Sort(want)
	if !slices.Equal(first, want) {
		t.Errorf("first %d steps drew %v, want each of %v once", len(kinds), first, want)
	}
	for range 500 {
		if s := p.next(); !slices.Contains(kinds, s.Fault) {
			t.Fatalf("drew %q, which is not enabled", s.Fault)
		}
	}
}

func TestRuntimeFaultStepsStayWithinTheirBounds(t *testing.T) {
	tm := DefaultTiming()
	p := newPlanner(11, tm, 4, []string{FaultLogStall, FaultSlowStore, FaultSameOwner})
	blips, stalls := 0, 0
	for range 600 {
		s := p.next()
		switch s.Fault {
		case FaultLogStall:
			stalls++
			if s.Dur < tm.TTL || s.Dur > 3*tm.TTL {
				t.Errorf("log stall of %v; want 1 to 3 TTL", s.Dur)
			}
			if s.Blip != 0 {
				blips++
				// One renewal must time out inside it, and the deadline fall inside the stall.
				if s.Blip < tm.RenewEvery+tm.CallTimeout || s.Blip+100*time.Millisecond > tm.TTL-tm.RenewEvery {
					t.Errorf("blip %v", s.Blip)
				}
			}
		case FaultSlowStore:
			if s.Latency < 6*tm.CallTimeout/10 || s.Latency > 9*tm.CallTimeout/10 || s.Dur < 2*tm.TTL || s.Dur > 4*tm.TTL {
				t.Errorf("slow store of %v round trip for %v; want 0.6 to 0.9 call timeouts for 2 to 4 TTL", s.Latency, s.Dur)
			}
		case FaultSameOwner:
			if s.Dur < tm.TTL || s.Dur > 3*tm.TTL {
				t.Errorf("same owner for %v", s.Dur)
			}
		}
	}
	if blips == 0 || blips == stalls {
		t.Errorf("%d of %d log stalls with a blip; want most, not all", blips, stalls)
	}
}

func TestFreezeWrapperStepsAimAtAKeyRunAsAChildForHalfToFourTTL(t *testing.T) {
	tm := DefaultTiming()
	for _, keys := range []int{1, 2, 5} {
		p := newPlanner(13, tm, keys, []string{FaultFreezeWrapper, FaultPause})
		for range 200 {
			s := p.next()
			if s.Fault != FaultFreezeWrapper {
				continue
			}
			if s.Key >= keys || !isChildKey(s.Key) {
				t.Errorf("%d keys: aimed at key %d, whose work does not run as a child", keys, s.Key)
			}
			if s.Dur < tm.TTL/2 || s.Dur > 4*tm.TTL {
				t.Errorf("a freeze of %v; want 0.5 to 4 TTL", s.Dur)
			}
		}
	}
}
