package shrink

import (
	"maps"
	"testing"
)

func TestAMapIsCopiedOnlyOnceMostOfItWasDropped(t *testing.T) {
	m := map[int]int{}
	for i := range 10 {
		m[i] = i
	}
	for i := range 5 {
		delete(m, i)
	}
	if got := Map(m, 5); !sameMap(got, m) {
		t.Fatal("half dropped: the map was copied")
	}
	for i := 5; i < 9; i++ {
		delete(m, i)
	}
	got := Map(m, 4)
	if sameMap(got, m) || !maps.Equal(got, map[int]int{9: 9}) {
		t.Fatalf("most dropped: got %v, the same map %v; want a copy of {9: 9}", got, sameMap(got, m))
	}
}

// sameMap reports whether a and b are one map: a write to one shows in
// the other.
func sameMap(a, b map[int]int) bool {
	a[-1] = -1
	_, same := b[-1]
	delete(a, -1)
	return same
}
