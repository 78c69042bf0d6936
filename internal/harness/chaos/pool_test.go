package chaos

import (
	"fmt"
	"testing"

	"github.com/tenure-dev/tenure/internal/engine/poolkey"
)

// poolStory is a story with a pool of three keys over r1 and r2; run
// records a key's work from one instant to another (milliseconds).
type poolStory struct {
	*story
	keys []string
}

func newPoolStory() *poolStory {
	s := &poolStory{story: newStory("r1", "r2")}
	for i := range 3 {
		s.keys = append(s.keys, poolkey.Key("p/", poolName, fmt.Sprintf("a%d", i)))
	}
	s.h.PoolKeys = s.keys
	return s
}

func (s *poolStory) run(r string, key, from, to int) *poolStory {
	s.add(Event{T: s.at(from), Replica: r, Ev: evStart, Key: s.keys[key], Epoch: int64(from + 1)})
	s.add(Event{T: s.at(to), Replica: r, Ev: evStop, Key: s.keys[key], Epoch: int64(from + 1), Cause: "released"})
	return s
}

// A replica that takes a share it cannot run leaves keys to nobody in
// turn: each key runs nowhere for a few seconds only, never longer than
// the bound, but at no moment does every key run. The check must see it.
func TestPoolKeysLeftToNobodyInTurnAreCaught(t *testing.T) {
	s := newPoolStory()
	s.run("r1", 0, -50, 60_000).run("r2", 1, -50, 60_000)
	// Key 2 runs nowhere for 3 s at a time, 3 s after 3 s, from 10 s to
	// 40 s, while key 1 is handed over in the moments key 2 runs.
	s.run("r2", 2, -50, 10_000)
	for at := 13_000; at < 40_000; at += 6_000 {
		s.run("r1", 2, at, at+3_000)
	}
	s.run("r1", 2, 43_000, 60_000)
	s.fault(FaultSourceDown, "r3", 9_000, 41_000)
	rep := s.check(t)
	got := violations(rep, InvPoolRuns)
	if len(got) != 0 {
		t.Fatalf("one key left alone between runs: %+v; want no violation", got)
	}

	// Now key 1 is let go whenever key 2 runs: no instant in 30 s at which
	// all three keys run.
	s = newPoolStory()
	s.run("r1", 0, -50, 60_000).run("r2", 2, -50, 10_000)
	s.run("r2", 1, -50, 13_000)
	for at := 13_000; at < 40_000; at += 6_000 {
		s.run("r1", 2, at, at+3_000)
		s.run("r2", 1, at+3_000, at+6_000)
	}
	s.run("r1", 2, 43_000, 60_000).run("r2", 1, 43_000, 60_000)
	s.fault(FaultSourceDown, "r3", 9_000, 41_000)
	rep = s.check(t)
	if got := violations(rep, InvPoolRuns); len(got) != 1 {
		t.Fatalf("keys left to nobody in turn for 33 s: %+v; want one violation", got)
	}

	// The same during a kill is the kill's: its takeover check covers it.
	s = newPoolStory()
	s.run("r1", 0, -50, 60_000).run("r2", 2, -50, 10_000)
	s.run("r2", 1, -50, 13_000)
	for at := 13_000; at < 40_000; at += 6_000 {
		s.run("r1", 2, at, at+3_000)
		s.run("r2", 1, at+3_000, at+6_000)
	}
	s.run("r1", 2, 43_000, 60_000).run("r2", 1, 43_000, 60_000)
	s.fault(FaultKill, "r3", 20_000, 20_000)
	if got := violations(s.check(t), InvPoolRuns); len(got) != 0 {
		t.Fatalf("keys left to nobody around a kill: %+v; want it excused", got)
	}
}
