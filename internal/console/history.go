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
	// last is each key's lease at the last read, now the one being taken,
	// and owner this process's owner id: what explains a term's end (a
	// move record from its holder, a crash loop here, an expiry passed).
	last, now map[string]Lease
	cooling   map[string]bool
	owner     string
}

func newHistory(perKey, keep int) *history {
	return &history{perKey: perKey, keep: keep, terms: map[string][]Term{}}
}

// observe takes one read of the store at time at (Unix ms).
func (h *history) observe(at int64, leases []Lease, local localState) {
	h.now, h.cooling, h.owner = make(map[string]Lease, len(leases)), local.cooling, local.owner
	for _, l := range leases {
		h.now[l.Key] = l
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
				last.End, last.Cause = at, h.endCause(at, l.Key, last.Owner, l.State)
			}
		case l.Owner == "" && l.State != "held":
			// A revoked or dead record of a term never seen held.
			if last != nil && last.End == 0 {
				last.End, last.Cause = at, h.endCause(at, l.Key, last.Owner, l.State)
			}
		default:
			cause := CauseFirst
			from := ""
			if last != nil {
				if last.End == 0 {
					last.End, last.Cause = at, h.endCause(at, l.Key, last.Owner, "")
				}
				cause, from = last.Cause, last.Owner
			}
			t := Term{Key: l.Key, Owner: l.Owner, Epoch: l.Epoch, Start: at}
			if l.State != "held" {
				t.End, t.Cause = at, h.endCause(at, l.Key, l.Owner, l.State)
			}
			ts = append(ts, t)
			if len(ts) > h.perKey {
				ts = ts[len(ts)-h.perKey:]
			}
			h.terms[l.Key] = ts
			// A term first seen already over is drawn, but who had it
			// when is not known: no handoff.
			if h.started && t.End == 0 {
				h.handoffs = append(h.handoffs, Handoff{Key: l.Key, At: at, From: from, To: l.Owner, Epoch: l.Epoch, Cause: cause})
				if len(h.handoffs) > h.keep {
					h.handoffs = h.handoffs[len(h.handoffs)-h.keep:]
				}
			}
		}
	}
	h.started = true
	h.last = h.now
}

// endCause says why owner's term of key ended, given the state its record
// shows ("" when a new term replaced it unseen) at time at.
func (h *history) endCause(at int64, key, owner, state string) string {
	last, now := h.last[key], h.now[key]
	switch {
	case owner != "" && (last.movedFrom == owner || now.movedFrom == owner):
		return CauseMoved
	case owner != "" && owner == h.owner && h.cooling[key]:
		return CauseCrashLoop
	case state == "released":
		return CauseReleased
	case state == "revoked":
		return CauseRevoked
	case state == "expired":
		return CauseExpired
	case last.Owner == owner && last.State == "held" && last.expiresAt <= at:
		return CauseExpired // it expired between the reads
	}
	return CauseUnseen
}

// recent returns the terms of every key still listed that went on at or
// after since (Unix ms), and the handoffs, newest last.
func (h *history) recent(leases []Lease, since int64) ([]Term, []Handoff) {
	var terms []Term
	listed := make(map[string]bool, len(leases))
	for _, l := range leases {
		listed[l.Key] = true
		for _, t := range h.terms[l.Key] {
			if t.End == 0 || t.End >= since {
				terms = append(terms, t)
			}
		}
	}
	for k := range h.terms {
		if !listed[k] {
			delete(h.terms, k) // pruned, or out of the prefix
		}
	}
	return terms, append([]Handoff{}, h.handoffs...)
}
