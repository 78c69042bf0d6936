package console

import (
	"slices"
	"testing"
)

func held(key, owner string, epoch int64) Lease {
	return Lease{Key: key, Owner: owner, Epoch: epoch, State: "held"}
}

func with(l Lease, f func(*Lease)) Lease { f(&l); return l }

// Each way a term can end is told apart by what the store showed, and
// the first read is a baseline, not a flood of handoffs.
func TestHandoffCauses(t *testing.T) {
	none := localState{}
	for _, tc := range []struct {
		name   string
		before []Lease // the read that shows the old term end, if any
		local  localState
		want   string
	}{
		{"released", []Lease{with(held("k", "a", 1), func(l *Lease) { l.State = "released" })}, none, CauseReleased},
		{"expired", []Lease{with(held("k", "a", 1), func(l *Lease) { l.State = "expired" })}, none, CauseExpired},
		{"revoked", []Lease{with(held("k", "", 1), func(l *Lease) { l.State = "revoked" })}, none, CauseRevoked},
		{"moved", []Lease{with(held("k", "a", 1), func(l *Lease) { l.movedFrom = "a" })}, none, CauseMoved},
		// A move record from another holder explains nothing of a's.
		{"moved from another", []Lease{with(held("k", "a", 1), func(l *Lease) { l.movedFrom = "z"; l.expiresAt = 100 })}, none, CauseUnseen},
		{"crash-loop", []Lease{with(held("k", "a", 1), func(l *Lease) { l.State = "released" })},
			localState{owner: "a", cooling: map[string]bool{"k": true}}, CauseCrashLoop},
		// Cooling here says nothing of a peer's term.
		{"crash-loop elsewhere", []Lease{with(held("k", "a", 1), func(l *Lease) { l.State = "released" })},
			localState{owner: "me", cooling: map[string]bool{"k": true}}, CauseReleased},
		// Seen held with its expiry before the next read: it expired.
		{"expired between reads", []Lease{with(held("k", "a", 1), func(l *Lease) { l.expiresAt = 2 })}, none, CauseExpired},
		{"unseen", []Lease{with(held("k", "a", 1), func(l *Lease) { l.expiresAt = 100 })}, none, CauseUnseen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(20, 200)
			h.observe(1, []Lease{with(held("k", "a", 1), func(l *Lease) { l.expiresAt = 100 }), held("other", "x", 5)}, none)
			if len(h.handoffs) != 0 {
				t.Fatalf("the first read made handoffs: %+v", h.handoffs)
			}
			at := int64(2)
			if tc.before != nil {
				h.observe(at, tc.before, tc.local)
				at++
			}
			h.observe(at, []Lease{held("k", "b", 2)}, tc.local)
			want := []Handoff{{Key: "k", At: at, From: "a", To: "b", Epoch: 2, Cause: tc.want}}
			if tc.name == "revoked" {
				want[0].From = "a" // the last holder seen, not the revoked record's nobody
			}
			if !slices.Equal(h.handoffs, want) {
				t.Errorf("handoffs %+v, want %+v", h.handoffs, want)
			}
			terms, _ := h.recent([]Lease{held("k", "b", 2)}, 0)
			if len(terms) != 2 || terms[0].End == 0 || terms[0].Cause != tc.want || terms[1].End != 0 {
				t.Errorf("terms %+v: want a's ended (%s), b's going on", terms, tc.want)
			}
		})
	}
}

// A key seen for the first time after the baseline is handed to its
// first holder; keys no longer listed are forgotten.
func TestNewKeysAndForgottenKeys(t *testing.T) {
	h := newHistory(2, 200)
	h.observe(1, nil, localState{})
	h.observe(2, []Lease{held("k", "a", 1)}, localState{})
	if want := []Handoff{{Key: "k", At: 2, To: "a", Epoch: 1, Cause: CauseFirst}}; !slices.Equal(h.handoffs, want) {
		t.Errorf("handoffs %+v, want %+v", h.handoffs, want)
	}
	for e := int64(2); e <= 4; e++ {
		h.observe(e+1, []Lease{held("k", "a", e)}, localState{})
	}
	if n := len(h.terms["k"]); n != 2 {
		t.Errorf("%d terms kept of k, want the last 2", n)
	}
	h.recent(nil, 0)
	if len(h.terms) != 0 {
		t.Errorf("terms of unlisted keys kept: %v", h.terms)
	}
}
