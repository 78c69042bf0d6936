package chaos

import (
	"strings"
	"testing"
	"time"
)

// slowStory: r1 holds the key from 0 and stops at its deadline at 2600,
// its last renewal sent at 1200, every call answered within a
// millisecond; a slow-store fault slows r1 over [from, to].
func slowStory(target string, from, to int) *story {
	s := newStory("r1", "r2")
	s.run("r1", 1, 0, 2600, causeDeadline)
	s.add(Event{T: s.at(from), Ev: evFaultBegin, Fault: FaultSlowStore, Target: target, Latency: int64(250 * time.Millisecond)})
	s.add(Event{T: s.at(to), Ev: evFaultEnd, Fault: FaultSlowStore, Target: target})
	s.run("r2", 2, 4300, 9000, causeStopping)
	return s
}

func TestADeadlineStopWhileTheSlowStoreAnsweredEveryCallIsStarvation(t *testing.T) {
	for _, target := range []string{"r1", "*"} {
		rep := slowStory(target, 500, 2000).check(t) // the stop comes within a TTL of the window's end
		v := requireOnly(t, rep, InvStarved)
		if v.Replica != "r1" || v.Amount != 1400*time.Millisecond || !strings.Contains(v.Detail, "renewals starved by a slow store") {
			t.Errorf("target %s: %+v; want r1 starved for 1.4s since its last renewal", target, v)
		}
		if rep.SlowStore.DeadlineStops != 1 || rep.SlowStore.RenewalGap != 1400*time.Millisecond {
			t.Errorf("target %s: slow-store figures %+v", target, rep.SlowStore)
		}
	}
}

func TestADeadlineStopOutsideASlowStoreWindowIsNoStarvation(t *testing.T) {
	for name, s := range map[string]*story{
		"window after the stop":           slowStory("r1", 3000, 5000),
		"window ended over a TTL earlier": slowStory("r1", -3000, 500-2000),
		"another replica slowed":          slowStory("r2", 500, 2000),
	} {
		if rep := s.check(t); len(violations(rep, InvStarved)) > 0 {
			t.Errorf("%s: reported starvation:\n%s", name, text(rep))
		}
	}
}

func TestADeadlineStopAfterAFailedCallOrAFreezeIsExcused(t *testing.T) {
	failed := slowStory("r1", 500, 2000)
	failed.add(Event{T: failed.at(1800), Replica: "r1", Ev: evList, Sent: failed.at(1500), Outcome: outError, Err: "timeout"})
	tooSlow := slowStory("r1", 500, 2000) // answered, but after the call timeout
	tooSlow.add(Event{T: tooSlow.at(1850), Replica: "r1", Ev: evList, Sent: tooSlow.at(1500), Outcome: outOK})
	frozen := slowStory("r1", 500, 2000)
	frozen.fault(FaultPause, "r1", 1500, 1700)
	for name, s := range map[string]*story{"failed call": failed, "call over the timeout": tooSlow, "frozen": frozen} {
		rep := s.check(t)
		if len(violations(rep, InvStarved)) > 0 || rep.SlowStore.Excused != 1 {
			t.Errorf("%s: excused %d, report:\n%s", name, rep.SlowStore.Excused, text(rep))
		}
	}
}

// A renewal whose reply arrives after the stop point it would have moved
// does not count as confirming the term: the deadline was still reached.
func TestARenewalConfirmedTooLateDoesNotHideStarvation(t *testing.T) {
	s := slowStory("r1", 500, 2000)
	s.add(Event{T: s.at(2601), Replica: "r1", Ev: evRenew, Sent: s.at(2350), Outcome: outOK,
		Items: []Item{{Key: storyKey, Epoch: 1, OK: true}}})
	// (The store extended the term, so r2's grant at 4300 is early too.)
	rep := s.check(t)
	if v := violations(rep, InvStarved); len(v) != 1 || v[0].Amount != 1150*time.Millisecond {
		t.Errorf("want one starvation with a 1.15s gap (renewals sent at 1200 and 2350), got:\n%s", text(rep))
	}
}

// sharedOwnerStory: r4 is started with r1's owner name; ids are what
// each replica's proc record says the store saw.
func sharedOwnerStory(id1, id4 string) *story {
	s := newStory("r1", "r2")
	s.add(Event{T: s.at(-50), Replica: "r1", Ev: evProc, Owner: id1, Configured: "name-1"})
	s.add(Event{T: s.at(1000), Ev: evSpawn, Target: "r4", Configured: "name-1"})
	s.add(Event{T: s.at(1000), Ev: evFaultBegin, Fault: FaultSameOwner, Target: "r1", Peer: "r4"})
	s.add(Event{T: s.at(1100), Replica: "r4", Ev: evProc, Owner: id4, Configured: "name-1"})
	s.run("r1", 1, 0, 1500, causeLost)
	s.run("r4", 2, 1200, 4000, causeStopping)
	s.add(Event{T: s.at(4100), Ev: evExited, Target: "r4"})
	s.add(Event{T: s.at(4100), Ev: evFaultEnd, Fault: FaultSameOwner, Target: "r1", Peer: "r4"})
	return s
}

func TestTwoProcessesUnderOneOwnerIDOverlapAndTakeOverEarly(t *testing.T) {
	rep := sharedOwnerStory("name-1", "name-1").check(t)
	if len(violations(rep, InvOverlap)) != 1 || len(violations(rep, InvEarly)) != 1 {
		t.Fatalf("want one overlap and one early takeover, got:\n%s", text(rep))
	}
	if rep.SameOwners != 1 || rep.SharedIDs != 1 {
		t.Errorf("same-owner faults %d, shared ids %d; want 1, 1", rep.SameOwners, rep.SharedIDs)
	}
}

func TestProcessesAreToldApartByTheIDTheirSupervisorReports(t *testing.T) {
	// One configured name, two ids: the checker sees two owners, whatever
	// the spawn records say they were configured with.
	rep := sharedOwnerStory("name-1#a1", "name-1#b2").check(t)
	if rep.SameOwners != 1 || rep.SharedIDs != 0 {
		t.Errorf("same-owner faults %d, shared ids %d; want 1, 0", rep.SameOwners, rep.SharedIDs)
	}
	r4 := buildModel(rep.History).replicas["r4"]
	if r4.owner != "name-1#b2" || r4.configured != "name-1" {
		t.Errorf("r4 is owner %q configured as %q; want name-1#b2, name-1", r4.owner, r4.configured)
	}
}
