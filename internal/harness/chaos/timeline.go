package chaos

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"
	"time"
)

// Layout of the SVG timeline.
const (
	tlPerSec = 15 // px per second of the time axis, between tlMinW and tlMaxW
	tlMinW   = 1600
	tlMaxW   = 24000
	tlLabel  = 170 // left column with key names
	tlRow    = 26
	tlHeader = 30
)

var tlPalette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#bab0ac"}

var tlFaultColor = map[string]string{
	FaultKill: "#d62728", FaultPause: "#7f7f7f", FaultPartition: "#9467bd",
	FaultHold: "#8c564b", FaultLoseReplies: "#c49c94", FaultLatency: "#17becf", FaultRestart: "#2ca02c", FaultStoreRestart: "#e377c2", FaultSourceDown: "#aec7e8",
	FaultLogStall: "#bcbd22", FaultSlowStore: "#1f77b4", FaultSameOwner: "#ff7f0e", FaultFreezeWrapper: "#393b79", FaultAbandon: "#98df8a",
}

// faultLabel names a fault in the timeline: its kind and target, the
// extra replica of a same-owner pair, a slow store's added round trip.
func faultLabel(f faultWindow) string {
	s := f.kind + " " + f.target
	switch {
	case f.peer != "":
		s += "=" + f.peer
	case f.latency > 0:
		s += " +" + time.Duration(f.latency).Round(time.Millisecond).String()
	}
	return s
}

// WriteTimeline draws a history as SVG: one row per key with a bar per
// runner interval, coloured by replica (hatched while its process was
// frozen, dotted while its log sink was stalled), a row of faults on top,
// and violations outlined in red. Work done in a child process has a
// dashed outline; while its wrapper was frozen, a dark strip runs along
// its foot (the child itself is not frozen), and a black tick marks the
// deadline its guard had when a freeze-wrapper fault began.
func WriteTimeline(w io.Writer, h *History) error {
	if h == nil {
		return fmt.Errorf("chaos: no history to draw")
	}
	m := buildModel(h)
	rep := Check(h)
	// Time 0 is the first fault, as in the report; the warm-up is cut off.
	from, to := m.begin, m.end
	if to <= from {
		to = from + 1
	}
	tlWidth := float64(min(max(time.Duration(to-from).Seconds()*tlPerSec, tlMinW), tlMaxW))
	x := func(t int64) float64 {
		return tlLabel + float64(max(min(t, to), from)-from)/float64(to-from)*tlWidth
	}
	keys := slices.Concat(h.Keys, h.PoolKeys)
	for k := range m.intervals {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	colors := map[string]string{}
	var names []string
	for name := range m.replicas {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return compareInt(int64(len(a)), int64(len(b)))*2 + strings.Compare(a, b) })
	for i, name := range names {
		colors[name] = tlPalette[i%len(tlPalette)]
	}

	height := tlHeader + tlRow*(len(keys)+1) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		tlLabel+tlWidth+20, height)
	b.WriteString(`<defs><pattern id="frozen" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="3" height="6" fill="white" fill-opacity="0.6"/></pattern>` +
		`<pattern id="stalled" width="6" height="6" patternUnits="userSpaceOnUse">` +
		`<circle cx="3" cy="3" r="1.5" fill="black" fill-opacity="0.5"/></pattern></defs>` + "\n")
	fmt.Fprintf(&b, `<text x="4" y="16" font-size="13">seed %d · %s · %v · %s</text>`+"\n",
		h.Seed, html.EscapeString(h.Store), time.Duration(to-from).Round(time.Second), verdictText(rep))
	// Seconds grid.
	for s := int64(0); from+s*int64(time.Second) <= to; s += gridStep(to-from, tlWidth) {
		gx := x(from + s*int64(time.Second))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" fill="#999">%ds</text>`+"\n",
			gx, tlHeader, gx, height-30, gx+2, height-18, s)
	}
	// Faults row.
	y := tlHeader
	fmt.Fprintf(&b, `<text x="4" y="%d">faults</text>`+"\n", y+16)
	for _, f := range m.faults {
		x0, x1 := x(f.from), x(f.to)
		label := html.EscapeString(faultLabel(f))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.7"><title>%s</title></rect>`+"\n",
			x0, y+3, max(x1-x0, 2), tlRow-6, tlFaultColor[f.kind], label)
		if x1-x0 > 40 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="white">%s</text>`+"\n", x0+2, y+17, label)
		}
	}
	// One row per key.
	_, guardMarks := m.wrapperFreezes()
	for i, key := range keys {
		y = tlHeader + tlRow*(i+1)
		fmt.Fprintf(&b, `<text x="4" y="%d">%s</text>`+"\n", y+16, html.EscapeString(key))
		for _, iv := range m.intervals[key] {
			x0, x1 := x(iv.start), x(iv.end)
			outline := ""
			if iv.pid != 0 {
				outline = ` stroke="black" stroke-dasharray="4,2"`
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s><title>%s epoch %d, %v, stop: %s</title></rect>`+"\n",
				x0, y+3, max(x1-x0, 1), tlRow-6, colors[iv.r.name], outline, html.EscapeString(iv.who()), iv.epoch,
				time.Duration(iv.end-iv.start).Round(time.Millisecond), html.EscapeString(iv.cause))
			if iv.pid != 0 {
				for _, p := range iv.r.pauses {
					if p.to > iv.start && p.from < iv.end {
						px0, px1 := x(max(p.from, iv.start)), x(min(p.to, iv.end))
						fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="5" fill="black" fill-opacity="0.6"><title>%s frozen; its child runs on</title></rect>`+"\n",
							px0, y+tlRow-8, max(px1-px0, 1), iv.r.name)
					}
				}
			}
			for _, marks := range []struct {
				spans []span
				fill  string
			}{{iv.pauses(), "url(#frozen)"}, {iv.r.stalls, "url(#stalled)"}} {
				for _, p := range marks.spans {
					if p.to > iv.start && p.from < iv.end {
						px0, px1 := x(max(p.from, iv.start)), x(min(p.to, iv.end))
						fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", px0, y+3, max(px1-px0, 1), tlRow-6, marks.fill)
					}
				}
			}
			if x1-x0 > 60 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="white">%s e%d</text>`+"\n", x0+3, y+17, iv.r.name, iv.epoch%100000)
			}
		}
		for _, g := range guardMarks {
			if g.key == key {
				gx := x(g.at)
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" stroke-width="2"><title>guard deadline</title></line>`+"\n",
					gx, y, gx, y+tlRow)
			}
		}
		for _, v := range rep.Violations {
			if v.Key != key {
				continue
			}
			vx := x(m.begin + int64(v.At))
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="none" stroke="red" stroke-width="2"><title>%s</title></rect>`+"\n",
				vx-2, y+1, max(float64(v.Amount)/float64(to-from)*tlWidth, 4), tlRow-2, html.EscapeString(v.Detail))
		}
	}
	// Legend.
	lx := float64(tlLabel)
	for _, name := range names {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%d" width="10" height="10" fill="%s"/><text x="%.0f" y="%d">%s</text>`+"\n",
			lx, height-12, colors[name], lx+13, height-3, name)
		lx += 45
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func verdictText(r *Report) string {
	if r.OK() {
		return "no violations"
	}
	return fmt.Sprintf("%d violations", len(r.Violations))
}

// gridStep picks a whole number of seconds between grid lines, at least
// 60px apart.
func gridStep(span int64, width float64) int64 {
	for _, s := range []int64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600} {
		if float64(span/(s*int64(time.Second))) <= width/60 {
			return s
		}
	}
	return 1200
}
