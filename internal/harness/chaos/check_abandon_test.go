package chaos

import (
	"strings"
	"testing"
	"time"
)

// abandoned is a story in which r1 renews the key until 2400 ms, then an
// abandon fault on r1 (from 2900 ms) leaves the term out of its renewal
// sent at 3000 ms and answers it lost, and r2 starts the key at peerAt
// (never when negative).
func abandoned(kind string, peerAt int) *story {
	s := newStory("r1", "r2")
	s.h.Kind = kind
	s.run("r1", 1, 0, 3000, causeLost) // renewals every 600 ms, the last sent at 2400
	s.fault(FaultAbandon, "r1", 2900, 12_900)
	s.add(Event{T: s.at(3000), Replica: "r1", Ev: evAbandon, Key: storyKey, Epoch: 1, Sent: s.at(3000)})
	if peerAt >= 0 {
		s.run("r2", 2, peerAt, 20_000, causeStopping)
	}
	return s
}

func TestAnAbandonedTermRunByAPeerWithinTheBoundPasses(t *testing.T) {
	rep := abandoned(kindPostgres, 2400+4000).check(t)
	if !rep.OK() {
		t.Fatalf("a peer ran the key 4 s after the last renewal of the abandoned term:\n%s", text(rep))
	}
	if a := rep.Abandoned; a.N != 1 || a.Max != 4*time.Second || a.Renewed != 1 || a.Excused != 0 {
		t.Errorf("abandoned %+v, want one at 4s, renewed before", a)
	}
}

// A store that kept the abandoned term alive with its holder's others (a
// session renewed for them all) lets no peer in until long past the bound.
// The violation tells what the peer asked the store meanwhile, so that a
// late run in a log is told apart from a store that kept the key.
func TestAnAbandonedTermThatOutlivesTheBoundIsCaught(t *testing.T) {
	s := abandoned(kindPostgres, 2400+6000)
	s.add(Event{T: s.at(3300), Replica: "r2", Ev: evAcquire, Key: storyKey, Sent: s.at(3295), Outcome: outHeld,
		Epoch: 1, Owner: "r1", Left: int64(1100 * time.Millisecond)})
	v := requireOnly(t, s.check(t), InvAbandoned)
	if v.Replica != "r2" || v.Amount != 6*time.Second-abandonedBound(kindPostgres) {
		t.Errorf("violation %+v, want r2's, late by %v", v, 6*time.Second-abandonedBound(kindPostgres))
	}
	// r2's grant is sent 2 ms before its run starts (story.run).
	const want = "peers' acquisitions after it: r2 +895ms held (left 1.1s) r2 +5.998s ok (answered +5.999s); run started +6s"
	if !strings.Contains(v.Detail, want) {
		t.Errorf("detail %q\nwant it to contain %q", v.Detail, want)
	}
}

func TestAnAbandonedTermNobodyRunsIsCaught(t *testing.T) {
	requireOnly(t, abandoned(kindSQLite, -1).check(t), InvAbandoned)
}

// etcd takes an unlisted term off its session only a TTL after its last
// renewal, and keeps peers out for TTL + grace more.
func TestEtcdsAbandonBoundAllowsItsEviction(t *testing.T) {
	if rep := abandoned(kindEtcd, 2400+6000).check(t); !rep.OK() {
		t.Errorf("etcd: a peer 6 s after an abandoned term's last renewal fails:\n%s", text(rep))
	}
	if rep := abandoned(kindEtcd, 2400+9000).check(t); rep.OK() {
		t.Errorf("etcd: a peer 9 s after an abandoned term's last renewal passes (bound %v)", rep.Abandoned.Bound)
	}
}

// Another fault (here a partition of every replica) may stretch the wait,
// and a released term ends at once: neither is checked.
func TestAnAbandonedTermIsExcusedByAnotherFaultOrARelease(t *testing.T) {
	s := abandoned(kindPostgres, -1)
	s.fault(FaultPartition, "*", 4000, 5000)
	if rep := s.check(t); len(violations(rep, InvAbandoned)) != 0 {
		t.Errorf("a partition during the wait is not excused:\n%s", text(rep))
	}
	s = abandoned(kindPostgres, -1)
	s.add(Event{T: s.at(3100), Replica: "r1", Ev: evRelease, Sent: s.at(3100), Items: []Item{{Key: storyKey, Epoch: 1}}})
	if rep := s.check(t); len(violations(rep, InvAbandoned)) != 0 {
		t.Errorf("a released term is checked as abandoned:\n%s", text(rep))
	}
}

// A fault on a bystander excuses nothing while a peer is free to take the
// key; faults on every peer do, and so does one on a peer that acquired
// the key meanwhile (it may have been frozen or killed holding it).
func TestOnlyAFaultThatCouldKeepThePeersOutExcusesAnAbandonedTerm(t *testing.T) {
	s := abandoned(kindPostgres, -1)
	s.add(Event{T: s.at(-100), Ev: evSpawn, Target: "r3"})
	s.fault(FaultPause, "r3", 4000, 5000)
	if v := violations(s.check(t), InvAbandoned); len(v) != 1 {
		t.Errorf("a pause of a bystander, r2 free, excused nobody running the key: %+v", v)
	}
	s = abandoned(kindPostgres, -1)
	s.fault(FaultPause, "r2", 4000, 5000)
	if rep := s.check(t); len(violations(rep, InvAbandoned)) != 0 || rep.Abandoned.Excused != 1 {
		t.Errorf("a pause of the only peer is not excused:\n%s", text(rep))
	}
	s = abandoned(kindPostgres, -1)
	s.add(Event{T: s.at(-100), Ev: evSpawn, Target: "r3"})
	s.add(Event{T: s.at(5501), Replica: "r3", Ev: evAcquire, Key: storyKey, Epoch: 2, Sent: s.at(5500), Outcome: outOK})
	s.fault(FaultKill, "r3", 5600, 5610)
	if rep := s.check(t); len(violations(rep, InvAbandoned)) != 0 {
		t.Errorf("a peer killed holding the key, before its runner started, is not excused:\n%s", text(rep))
	}
}

// abandonedBound is the bound the checker applies to a history of kind.
func abandonedBound(kind string) time.Duration {
	c := &checker{t: DefaultTiming(), rep: &Report{History: &History{Kind: kind}}}
	return c.abandonBound()
}
