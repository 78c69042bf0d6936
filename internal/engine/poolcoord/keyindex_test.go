package poolcoord

import (
	"fmt"
	"testing"
)

func TestTheKeyIndexFindsEveryKeyWhereItWasFirstListedAndNothingElse(t *testing.T) {
	var empty *Index
	if _, ok := empty.Find("a"); ok {
		t.Fatal("an index never filled found a key")
	}
	for _, n := range []int{0, 1, 3, 4, 5, 1000, 100_000} {
		x := newIndex("p/", n)
		for i := range n {
			// Every fifth listing repeats the key listed just before it.
			k := fmt.Sprint("k", i-i%5/4)
			if added := x.add(k); added == (i%5 == 4) {
				t.Fatalf("n=%d: add(%q) = %v at listing %d", n, k, added, i)
			}
		}
		for i, k := range x.keys {
			if p, ok := x.Find(k); !ok || p != i {
				t.Fatalf("n=%d: find(%q) = %d, %v; want %d", n, k, p, ok, i)
			}
		}
		for _, k := range []string{"k4", "k9", "", "x"} { // never listed
			if p, ok := x.Find(k); ok {
				t.Fatalf("n=%d: find(%q) = %d, which is %q", n, k, p, x.keys[p])
			}
		}
	}
}
