package chaos

import (
	"fmt"
	"testing"
	"time"

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

// inTurn lets key 2, then key 1, run nowhere for 3 s at a time from 10 s
// to 43 s: no instant in 33 s at which all three keys run, though no key
// runs nowhere for more than 3 s. Key 0 runs throughout.
func (s *poolStory) inTurn() *poolStory {
	s.run("r1", 0, -50, 60_000).run("r2", 2, -50, 10_000).run("r2", 1, -50, 13_000)
	for at := 13_000; at < 40_000; at += 6_000 {
		s.run("r1", 2, at, at+3_000).run("r2", 1, at+3_000, at+6_000)
	}
	return s.run("r1", 2, 43_000, 60_000).run("r2", 1, 43_000, 60_000)
}

// A replica that takes a share it cannot run leaves keys to nobody in
// turn: each key runs nowhere for a few seconds only, never longer than
// the bound, but at no moment does every key run. The check must see it.
func TestPoolKeysLeftToNobodyInTurnAreCaught(t *testing.T) {
	// One key let go for 3 s at a time, with every key running between.
	s := newPoolStory()
	s.run("r1", 0, -50, 60_000).run("r2", 1, -50, 60_000).run("r2", 2, -50, 10_000)
	for at := 13_000; at < 40_000; at += 6_000 {
		s.run("r1", 2, at, at+3_000)
	}
	s.run("r1", 2, 43_000, 60_000)
	s.fault(FaultSourceDown, "r3", 9_000, 41_000)
	if got := violations(s.check(t), InvPoolRuns); len(got) != 0 {
		t.Fatalf("one key let go between runs: %+v; want no violation", got)
	}

	s = newPoolStory().inTurn()
	s.fault(FaultSourceDown, "r3", 9_000, 41_000)
	rep := s.check(t)
	if got := violations(rep, InvPoolRuns); len(got) != 1 {
		t.Fatalf("keys left to nobody in turn for 33 s: %+v; want one violation", got)
	}
	if rep.PoolChecked != time.Minute {
		t.Errorf("checked over %v; want the whole minute: no fault that stops work", rep.PoolChecked)
	}
}

// A fault that stops work excuses a spell only from its start to a bound
// after its end: a fault early in a long spell, or one that does not stop
// work (a slow store), must not hide it.
func TestOnlyTheStretchAFaultStopsWorkInIsExcused(t *testing.T) {
	bound := poolBoundOf(DefaultTiming(), "")
	for _, c := range []struct {
		name     string
		fault    string
		from, to int
		want     int
	}{
		{"a kill inside the spell: 11 s before it and 16 s after its bound", FaultKill, 21_000, 21_000, 2},
		{"a pause just before the spell, 30 s left after it", FaultPause, 8_000, 9_000, 1},
		{"a slow store over the whole spell", FaultSlowStore, 9_000, 44_000, 1},
		{"a partition over the whole spell", FaultPartition, 9_000, 44_000, 0},
		{"a pause that ends as the spell's last bound begins", FaultPause, 9_000, 43_000 - int(bound.Milliseconds()), 0},
	} {
		s := newPoolStory().inTurn()
		s.fault(c.fault, "r1", c.from, c.to)
		rep := s.check(t)
		if got := violations(rep, InvPoolRuns); len(got) != c.want {
			t.Errorf("%s: %d violations (%+v); want %d", c.name, len(got), got, c.want)
		}
	}
}

func TestSpansAreMergedAndCut(t *testing.T) {
	got := mergeSpans([]span{{5, 7}, {1, 3}, {3, 4}, {6, 9}, {10, 10}})
	if fmt.Sprint(got) != "[{1 4} {5 9}]" {
		t.Errorf("mergeSpans = %v", got)
	}
	if got := cutSpans(span{0, 20}, []span{{-5, 2}, {4, 6}, {18, 30}}); fmt.Sprint(got) != "[{2 4} {6 18}]" {
		t.Errorf("cutSpans = %v", got)
	}
}
