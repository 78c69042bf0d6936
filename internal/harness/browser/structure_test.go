package browser

import (
	"strings"
	"testing"
)

// TestOutlineFoldsOnlyRunsOfIdenticalSiblings pins the folding rule without a
// browser: equal siblings in a row fold, whole subtrees must match, and a run
// broken by another sibling starts again.
func TestOutlineFoldsOnlyRunsOfIdenticalSiblings(t *testing.T) {
	cell := part{Tag: "td", Role: "cell"}
	row := part{Tag: "tr", Role: "row", Parts: []part{cell, cell}}
	odd := part{Tag: "tr", Role: "row", Parts: []part{cell}}
	parts := []part{{Tag: "div", ID: "root", Parts: []part{
		row, row, row,
		odd,
		row,
		{Tag: "p", ID: "a"}, {Tag: "p", ID: "b"},
	}}}
	var out strings.Builder
	writeOutline(&out, parts, 0)
	const want = `div#root
  tr[role=row] ×N
    td[role=cell] ×N
  tr[role=row]
    td[role=cell]
  tr[role=row]
    td[role=cell] ×N
  p#a
  p#b
`
	if got := out.String(); got != want {
		t.Fatalf("outline =\n%s\nwant\n%s", got, want)
	}
}
