package console

// The causes a term ends with. Each is read off the store between two
// reads, so it is what the store showed, not what the holder knew.
const (
	CauseReleased  = "released"   // given back (shutdown, rebalance, pause)
	CauseExpired   = "expired"    // not renewed in time: a crash, a cut-off holder
	CauseRevoked   = "revoked"    // tenure release
	CauseMoved     = "moved"      // tenure move
	CauseCrashLoop = "crash-loop" // its runner kept failing on this process
	CauseUnseen    = "unseen"     // a new term came before a read showed the old one end
	CauseFirst     = "first"      // the first term seen of a key that had none
)

// Term is one holder's time with a key, as far as the console saw it.
type Term struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
	Epoch int64  `json:"epoch"`
	// Start and End are Unix milliseconds: when a read first showed the
	// term, and when one showed it end (0 while it goes on).
	Start int64  `json:"start"`
	End   int64  `json:"end,omitempty"`
	Cause string `json:"cause,omitempty"` // how it ended
}

// Handoff is a key changing hands: a new term, and how the last one ended.
type Handoff struct {
	Key   string `json:"key"`
	At    int64  `json:"at"`
	From  string `json:"from,omitempty"`
	To    string `json:"to"`
	Epoch int64  `json:"epoch"`
	Cause string `json:"cause"`
}

// history follows the terms of every key from read to read. The first
// read is its baseline: what was already held then is no handoff.
type history struct {
	perKey   int // terms kept per key
	keep     int // handoffs kept
	started  bool
	terms    map[string][]Term
	handoffs []Handoff
	// moving and cooling are the move records and this process's cooling
	// keys of the last read and of the one being taken: what explains a
	// term's end.
	moving, cooling, nowMoving, nowCooling map[string]bool
}

func newHistory(perKey, keep int) *history {
	return &history{perKey: perKey, keep: keep, terms: map[string][]Term{}}
}

// observe takes one read of the store at time at (Unix ms).
func (h *history) observe(at int64, leases []Lease, local localState) {
	h.nowMoving, h.nowCooling = map[string]bool{}, local.cooling
	for _, l := range leases {
		if l.Moving != "" {
			h.nowMoving[l.Key] = true
		}
	}
	for _, l := range leases {
		ts := h.terms[l.Key]
		var last *Term
		if len(ts) > 0 {
			last = &ts[len(ts)-1]
		}
		switch {
		case last != nil && last.Epoch == l.Epoch:
			if last.End == 0 && l.State != "held" {
				last.End, last.Cause = at, h.endCause(l.Key, l.State)
			}
		case l.Owner == "" && l.State != "held":
			// A revoked or dead record of a term never seen held.
			if last != nil && last.End == 0 {
				last.End, last.Cause = at, h.endCause(l.Key, l.State)
			}
		default:
			cause := CauseFirst
			from := ""
			if last != nil {
				if last.End == 0 {
					last.End, last.Cause = at, h.endCause(l.Key, "")
				}
				cause, from = last.Cause, last.Owner
			}
			t := Term{Key: l.Key, Owner: l.Owner, Epoch: l.Epoch, Start: at}
			if l.State != "held" {
				t.End, t.Cause = at, h.endCause(l.Key, l.State)
			}
			ts = append(ts, t)
			if len(ts) > h.perKey {
				ts = ts[len(ts)-h.perKey:]
			}
			h.terms[l.Key] = ts
			if h.started {
				h.handoffs = append(h.handoffs, Handoff{Key: l.Key, At: at, From: from, To: l.Owner, Epoch: l.Epoch, Cause: cause})
				if len(h.handoffs) > h.keep {
					h.handoffs = h.handoffs[len(h.handoffs)-h.keep:]
				}
			}
		}
	}
	h.started = true
	h.moving, h.cooling = h.nowMoving, h.nowCooling
}

// endCause says why a key's term ended, given the state its record shows
// ("" when a new term replaced it unseen) and the last read's records.
func (h *history) endCause(key, state string) string {
	switch {
	case h.moving[key] || h.nowMoving[key]:
		return CauseMoved
	case h.cooling[key] || h.nowCooling[key]:
		return CauseCrashLoop
	case state == "released":
		return CauseReleased
	case state == "revoked":
		return CauseRevoked
	case state == "expired":
		return CauseExpired
	}
	return CauseUnseen
}

// recent returns the terms of every key still listed, and the handoffs,
// newest last.
func (h *history) recent(leases []Lease) ([]Term, []Handoff) {
	var terms []Term
	listed := make(map[string]bool, len(leases))
	for _, l := range leases {
		listed[l.Key] = true
		terms = append(terms, h.terms[l.Key]...)
	}
	for k := range h.terms {
		if !listed[k] {
			delete(h.terms, k) // pruned, or out of the prefix
		}
	}
	return terms, append([]Handoff{}, h.handoffs...)
}
