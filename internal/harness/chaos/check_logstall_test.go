package chaos

import "testing"

// list records a table read of r's round, sent at ms.
func (s *story) list(r string, ms int) *story {
	return s.add(Event{T: s.at(ms + 1), Replica: r, Ev: evList, Sent: s.at(ms), Outcome: outOK})
}

// rounds records r's table reads every 600ms in [from, to).
func (s *story) rounds(r string, from, to int) *story {
	for ms := from; ms < to; ms += 600 {
		s.list(r, ms)
	}
	return s
}

// stall records a log stall of r from 10 s to 16 s with a blip of 1.2 s
// early in it.
func (s *story) stall(r string) *story {
	s.fault(FaultLogStall, r, 10_000, 16_000)
	return s.fault(FaultPartition, r, 10_100, 11_300)
}

// checkedCases is how many cases of inv the run examined.
func checkedCases(rep *Report, inv string) int {
	for _, r := range rep.Invariants {
		if r.Name == inv {
			return r.Checked
		}
	}
	return -1
}

// A replica whose rounds stop with its log, once the store answers again,
// breaks InvLogStall; one whose rounds go on does not.
func TestARoundStuckOnAStalledLogIsCaught(t *testing.T) {
	s := newStory("r1", "r2").rounds("r1", 0, 11_000).rounds("r1", 16_100, 60_000).stall("r1")
	v := requireOnly(t, s.check(t), InvLogStall)
	if v.Replica != "r1" || v.Amount <= 0 {
		t.Fatalf("violation %+v, want r1's rounds stuck from the blip's end to the stall's end", v)
	}

	s = newStory("r1", "r2").rounds("r1", 0, 60_000).stall("r1")
	rep := s.check(t)
	if got := violations(rep, InvLogStall); len(got) != 0 || checkedCases(rep, InvLogStall) != 1 {
		t.Fatalf("rounds going on through the stall: %+v, checked %d; want no violation, one stall checked",
			got, checkedCases(rep, InvLogStall))
	}

	// A replica killed during the stall makes no calls either: the kill
	// answers for that, not the log.
	s = newStory("r1", "r2").rounds("r1", 0, 11_000).stall("r1")
	s.fault(FaultKill, "r1", 12_000, 13_000)
	if rep := s.check(t); len(violations(rep, InvLogStall)) != 0 || checkedCases(rep, InvLogStall) != 0 {
		t.Fatalf("a stall with a kill in it was held against the log: %+v", rep.Violations)
	}
}
