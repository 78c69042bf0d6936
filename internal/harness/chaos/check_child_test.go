package chaos

import (
	"strings"
	"testing"
	"time"
)

// childRun records a run of r's key done by its child pid: what run
// records for cause, with the work's own records carrying the pid and
// stopped by a signal, and the wrapper's records of the child: started
// with the deadline the grant gives, a new one with each renewal, and
// exited at exited with cause (exited 0: no record, as from a wrapper
// still frozen, or dead).
func (s *story) childRun(r string, pid int, epoch int64, from, to int, cause string, exited int) *story {
	n := len(s.h.Events)
	s.run(r, epoch, from, to, cause)
	stopAt := int64(s.h.Timing.TTL - s.h.Timing.RenewEvery)
	for i := n; i < len(s.h.Events); i++ {
		switch e := &s.h.Events[i]; e.Ev {
		case evStart:
			e.PID = pid
		case evStop:
			e.PID, e.Cause = pid, "terminated signal received"
		case evRenew:
			s.add(Event{T: e.T + 1, Replica: r, Ev: evChild, Key: storyKey, Epoch: epoch, PID: pid, Outcome: childDeadline,
				Deadline: e.Sent + stopAt})
		}
	}
	s.add(Event{T: s.at(from + 1), Replica: r, Ev: evChild, Key: storyKey, Epoch: epoch, PID: pid, Outcome: childStarted,
		Deadline: s.at(from-2) + stopAt})
	if exited != 0 {
		s.add(Event{T: s.at(exited), Replica: r, Ev: evChild, Key: storyKey, Epoch: epoch, PID: pid, Outcome: childExited, Cause: cause})
	}
	return s
}

// A frozen replica's own work is suspended while it is frozen and may
// stop promptly once resumed; its child is not frozen, so the same
// history from a child is an overlap.
func TestAChildsWorkIsNeverExcusedByItsWrappersFreeze(t *testing.T) {
	story := func(pid int) *story {
		s := newStory("r1", "r2")
		if pid == 0 {
			s.run("r1", 1, 0, 6000, causeDeadline)
		} else {
			s.childRun("r1", pid, 1, 0, 6000, causeDeadline, 6010)
		}
		s.fault(FaultPause, "r1", 1300, 5800)
		s.run("r2", 2, 4250, 9000, causeStopping)
		return s
	}
	if rep := story(0).check(t); len(violations(rep, InvOverlap)) > 0 || rep.PauseOverlaps != 1 {
		t.Fatalf("in-process work: want the overlap excused as a frozen holder's, got:\n%s", text(rep))
	}
	rep := story(500).check(t)
	v := violations(rep, InvOverlap)
	if len(v) != 1 || v[0].Amount != 1750*time.Millisecond || !strings.Contains(v[0].Detail, "r1's child 500") {
		t.Fatalf("child work: want a 1.75s overlap by r1's child 500, got:\n%s", text(rep))
	}
	if rep.PauseOverlaps != 0 || len(violations(rep, InvResume)) != 0 {
		t.Errorf("a child's work was judged as frozen work:\n%s", text(rep))
	}
}

// Stopped by its guard at the deadline while the wrapper is frozen, a
// child owes the successor the same margin as any runner stopped there;
// the cause comes from the wrapper, the child only saw a SIGTERM.
func TestAChildStoppedByItsGuardIsHeldToTheFailClosedMargin(t *testing.T) {
	for name, c := range map[string]struct {
		stop      int
		shortfall time.Duration
	}{"on time": {2600, 0}, "late": {3000, 350 * time.Millisecond}} {
		s := newStory("r1", "r2")
		s.childRun("r1", 500, 1, 0, c.stop, causeDeadline, 5100)
		s.fault(FaultFreezeWrapper, "r1", 1300, 5000)
		s.run("r2", 2, 4250, 9000, causeStopping)
		rep := s.check(t)
		if rep.Margin.N != 1 {
			t.Fatalf("%s: the child's stop was not held to the margin:\n%s", name, text(rep))
		}
		v := violations(rep, InvMargin)
		switch {
		case c.shortfall == 0 && !rep.OK():
			t.Errorf("%s: violations:\n%s", name, text(rep))
		case c.shortfall != 0 && (len(v) != 1 || v[0].Amount != c.shortfall):
			t.Errorf("%s: want a %v shortfall, got:\n%s", name, c.shortfall, text(rep))
		}
		w := rep.WrapperFreezes
		if w.N != 1 || w.Children != 1 || w.GuardStops != 1 || w.TakenOver != 1 ||
			w.AfterDeadline.Max != time.Duration(c.stop-2600)*time.Millisecond {
			t.Errorf("%s: freezes %+v; want one child stopped by its guard %dms after its deadline, then taken over", name, w, c.stop-2600)
		}
	}
}

// Its wrapper killed, a child is killed by its guard within milliseconds:
// its work ends with the wrapper, unless it goes on beating.
func TestAChildThatOutlivesItsDeadWrapperIsCaught(t *testing.T) {
	for _, orphan := range []bool{false, true} {
		s := newStory("r1", "r2")
		s.childRun("r1", 500, 1, 0, 0, "", 0) // no stop record: SIGKILL
		s.add(Event{T: s.at(2000), Ev: evFaultBegin, Fault: FaultKill, Target: "r1"})
		s.add(Event{T: s.at(2005), Ev: evExited, Target: "r1"})
		s.add(Event{T: s.at(2005), Ev: evFaultEnd, Fault: FaultKill, Target: "r1"})
		if orphan {
			for ms := 2100; ms <= 5000; ms += 100 {
				s.add(Event{T: s.at(ms), Replica: "r1", Ev: evBeat, Key: storyKey, Epoch: 1, PID: 500})
			}
		}
		s.run("r2", 2, 4250, 9000, causeStopping)
		rep := s.check(t)
		v := violations(rep, InvOverlap)
		if !orphan && len(v) != 0 || orphan && (len(v) != 1 || v[0].Amount != 750*time.Millisecond) {
			t.Errorf("orphan %v: overlaps %+v; want none, or 750ms from the orphan's beats:\n%s", orphan, v, text(rep))
		}
	}
}

func TestAChildThatEndsOnItsOwnFailsTheRun(t *testing.T) {
	s := newStory("r1", "r2")
	s.childRun("r1", 500, 1, 0, 1000, "exited", 1010)
	v := requireOnly(t, s.check(t), InvHealth)
	if v.Replica != "r1" || !strings.Contains(v.Detail, "child 500") {
		t.Errorf("%+v; want r1's child named", v)
	}
}
