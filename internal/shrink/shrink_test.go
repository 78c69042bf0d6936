package shrink

import (
	"maps"
	"testing"
)

func TestAMapIsCopiedOnceMostOfItWasDeletedOverAnyNumberOfCalls(t *testing.T) {
	m := Make[int, int]()
	for i := range 10 {
		m.M[i] = i
	}
	first := m.M
	for i := range 5 {
		m.Delete(i)
		m.Delete(i) // deleting what is gone counts nothing
		m.Compact()
	}
	if !sameMap(m.M, first) {
		t.Fatal("half deleted: the map was copied")
	}
	for i := 5; i < 9; i++ { // one at a time: the count runs across calls
		m.Delete(i)
		m.Compact()
	}
	if sameMap(m.M, first) || !maps.Equal(m.M, map[int]int{9: 9}) {
		t.Fatalf("most deleted: got %v, the same map %v; want a copy of {9: 9}", m.M, sameMap(m.M, first))
	}
	copied := m.M
	m.M[10] = 10
	m.Delete(9)
	m.Compact()
	if !sameMap(m.M, copied) {
		t.Fatal("the count did not start again at the copy")
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
