package chaos

import (
	"encoding/xml"
	"strings"
	"testing"
)

func TestTheTimelineDrawsEveryRunAndOutlinesViolations(t *testing.T) {
	s := newStory("r1", "r2")
	s.run("r1", 1, 0, 5000, causeStopping)
	s.run("r2", 2, 4500, 9000, causeStopping) // overlaps r1 by 500ms
	s.fault(FaultPause, "r2", 6000, 7000)
	svg := s.timeline(t)
	var doc struct {
		Rects []struct {
			Fill   string `xml:"fill,attr"`
			Stroke string `xml:"stroke,attr"`
			Title  string `xml:"title"`
		} `xml:"rect"`
	}
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatalf("not valid SVG/XML: %v", err)
	}
	var runs, faults, outlined, frozen int
	for _, r := range doc.Rects {
		switch {
		case r.Stroke == "red":
			if strings.Contains(r.Title, "both worked") {
				outlined++
			}
		case strings.Contains(r.Title, "epoch"):
			runs++
		case strings.HasPrefix(r.Title, FaultPause):
			faults++
		case r.Fill == "url(#frozen)":
			frozen++
		}
	}
	if runs != 2 || faults != 1 || outlined != 1 || frozen != 1 {
		t.Errorf("drew %d runs, %d faults, %d outlined violations, %d frozen stretches; want 2, 1, 1, 1", runs, faults, outlined, frozen)
	}
}

func TestTheTimelineMarksLogStallsAndNamesSameOwnerPairs(t *testing.T) {
	s := sharedOwnerStory("name-1", "name-1")
	s.add(Event{T: s.at(200), Replica: "r1", Ev: evLogGate, Outcome: "closed"})
	s.add(Event{T: s.at(900), Replica: "r1", Ev: evLogGate, Outcome: "open"})
	svg := s.timeline(t)
	if !strings.Contains(svg, `fill="url(#stalled)"`) || !strings.Contains(svg, "<title>same-owner r1=r4</title>") {
		t.Errorf("no stalled stretch or no same-owner pair in:\n%s", svg)
	}
}

func TestTheTimelineMarksChildWorkItsWrappersFreezeAndTheGuardsDeadline(t *testing.T) {
	s := newStory("r1", "r2")
	s.childRun("r1", 500, 1, 0, 2600, causeDeadline, 5100)
	s.fault(FaultFreezeWrapper, "r1", 1300, 5000)
	s.run("r2", 2, 4250, 9000, causeStopping)
	svg := s.timeline(t)
	for _, want := range []string{`stroke-dasharray="4,2"><title>r1&#39;s child 500 epoch 1`, "<title>r1 frozen; its child runs on</title>",
		"<title>guard deadline</title>", "<title>freeze-wrapper r1</title>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("no %s in:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, `fill="url(#frozen)"`) {
		t.Errorf("the child's work is hatched as frozen:\n%s", svg)
	}
}

// timeline ends the story and draws it.
func (s *story) timeline(t *testing.T) string {
	t.Helper()
	s.add(Event{T: s.at(60_000), Ev: evRunEnd})
	h := s.h
	sortEvents(h.Events)
	var b strings.Builder
	if err := WriteTimeline(&b, &h); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
