package browser

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/chromedp/chromedp"
)

// Repeated is the suffix of an outline line that stands for two or more
// identical siblings in a row. It carries no count on purpose: a table with
// 3 rows and one with 30 have the same structure.
const Repeated = " ×N"

// part is a named element as the page's script reports it: an element with an
// id or a data-role attribute, and the named parts below it.
type part struct {
	Tag   string `json:"tag"`
	ID    string `json:"id"`
	Role  string `json:"role"`
	Parts []part `json:"parts"`
}

// structureJS gives the named parts at and under the first element matching
// %s, or null when none does. An unnamed element is left out but its
// descendants are not, so they rise to the depth of its nearest named
// ancestor's children.
const structureJS = `(() => {
	const root = document.querySelector(%s);
	if (root === null) return null;
	const walk = (el) => {
		const parts = [];
		for (const c of el.children) parts.push(...walk(c));
		const id = el.id, role = el.getAttribute("data-role") || "";
		if (id === "" && role === "") return parts;
		return [{tag: el.localName, id, role, parts}];
	};
	return walk(root);
})()`

// Structure returns an outline of the DOM at and under the first element
// matching rootSelector, for tests that compare structure, not pixels: pixels
// change with fonts and data, the named parts of a page should not.
//
// The outline has one line per element that has an id or a data-role
// attribute, indented two spaces per depth among such elements, written as
// the tag name, "#id" if it has an id and "[role=x]" if it has
// data-role="x":
//
//	main#app[role=console]
//	  table#leases
//	    tr[role=row] ×N
//	      td[role=key]
//
// Elements with neither are skipped but their children are not; text,
// classes and styles are ignored. Two or more siblings in a row with the same
// outline (table rows, list items) become one line ending in [Repeated], so
// the outline does not change with how many rows the page shows. A single
// such sibling has no suffix. Every line ends in a newline.
func (b *Browser) Structure(rootSelector string) (string, error) {
	what := "outline " + rootSelector
	raw, err := call(b, what, chromedp.Evaluate[[]byte](fmt.Sprintf(structureJS, jsString(rootSelector))))
	if err != nil {
		return "", err
	}
	var parts []part
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("browser: %s: decoding %s: %w", what, shorten(string(raw)), err)
	}
	if parts == nil {
		return "", fmt.Errorf("browser: %s: no element matches", what)
	}
	var out strings.Builder
	writeOutline(&out, parts, 0)
	return out.String(), nil
}

// writeOutline writes the outline of sibling parts at the given depth,
// folding each run of siblings whose whole outlines are equal into one.
func writeOutline(out *strings.Builder, parts []part, depth int) {
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = outline(p, depth)
	}
	for i := 0; i < len(texts); {
		text := texts[i]
		n := 1
		for i+n < len(texts) && texts[i+n] == text {
			n++
		}
		if n > 1 {
			first, rest, _ := strings.Cut(text, "\n")
			text = first + Repeated + "\n" + rest
		}
		out.WriteString(text)
		i += n
	}
}

// outline is the text of one part and everything under it.
func outline(p part, depth int) string {
	var out strings.Builder
	out.WriteString(strings.Repeat("  ", depth))
	out.WriteString(p.Tag)
	if p.ID != "" {
		out.WriteString("#" + p.ID)
	}
	if p.Role != "" {
		out.WriteString("[role=" + p.Role + "]")
	}
	out.WriteString("\n")
	writeOutline(&out, p.Parts, depth+1)
	return out.String()
}
