package tenure

import (
	"maps"
	"slices"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/hold"
)

// KeyStatus is one key as this replica sees it.
type KeyStatus struct {
	Key string `json:"key"`
	// Configured: the key is in this replica's configuration. A key only
	// seen in the lease table (configured on a peer) has it false.
	Configured bool `json:"configured"`
	Enabled    bool `json:"enabled"`
	Mode       Mode `json:"-"`
	// Running: the runner runs here, or — for a key a peer leads — the
	// peer reported its runner running at its last renewal.
	Running bool `json:"running"`
	// RunningOn says whose report Running is: this replica's owner id
	// when the runner runs here, the peer's when it is the peer's word
	// (as of this replica's last read of the lease table), "" when not
	// running.
	RunningOn string `json:"running_on,omitempty"`
	// Leased: the key is arbitrated by a lease, so the fields below mean
	// something. False for Everywhere keys and in single-instance mode.
	Leased bool `json:"leased"`
	// Leader is the owner of the key's live lease, or "" when none is live.
	Leader     string `json:"leader,omitempty"`
	LeaderHere bool   `json:"leader_here"`
	// Epoch is the leader's term, when known.
	Epoch int64 `json:"epoch,omitempty"`
	// LastError is the last failure of this replica's runner, if any.
	LastError string `json:"last_error,omitempty"`
	// Paused: the key is paused cluster-wide (Pause) as of this replica's
	// last read of the lease table.
	Paused bool `json:"paused,omitempty"`
	// CoolingUntil, when set, is when this replica may ask for the key
	// again: its runner kept failing here and the key was handed over
	// (Config.MaxFailures).
	CoolingUntil time.Time `json:"cooling_until,omitzero"`
}

// Status returns every key known here — configured locally or seen in the
// store — sorted by key.
func (s *Supervisor) Status() []KeyStatus {
	s.mu.Lock()
	defer s.unlock()
	keys := make(map[string]bool)
	for key, ks := range s.keys {
		if ks.configured {
			keys[key] = true
		}
	}
	if s.leased {
		for _, key := range s.keeper.ObservedKeys() {
			if !holdsRecordInfix(key) {
				keys[key] = true
			}
		}
	}
	out := make([]KeyStatus, 0, len(keys))
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		out = append(out, s.statusLocked(key))
	}
	return out
}

// KeyStatus returns one key's status (the zero status for an unknown key,
// with Key set).
func (s *Supervisor) KeyStatus(key string) KeyStatus {
	s.mu.Lock()
	defer s.unlock()
	return s.statusLocked(key)
}

func (s *Supervisor) statusLocked(key string) KeyStatus {
	st := KeyStatus{Key: key}
	ks := s.keys[key]
	if ks != nil && ks.configured {
		st.Configured, st.Enabled, st.Mode = true, !ks.job.Disabled, ks.job.Mode
		st.Running = ks.run != nil && !ks.run.stopped()
		if st.Running {
			st.RunningOn = s.owner
		}
		if f := ks.failed(); f.last != nil {
			st.LastError = f.last.Error()
		}
		st.Paused = ks.ctl.paused
		if ks.intent() == cooling {
			st.CoolingUntil = ks.failed().coolUntil
		}
	}
	if !s.leased || st.Mode == Everywhere && st.Configured {
		return st
	}
	st.Leased = true
	if t, ok := s.keeper.Term(key); ok {
		st.Leader, st.LeaderHere, st.Epoch = s.owner, true, t.Epoch
		return st
	}
	if l, ok := s.keeper.Observed(key); ok && l.Live && l.Owner != "" {
		st.Leader, st.Epoch = l.Owner, l.Epoch
		st.LeaderHere = l.Owner == s.owner
		if !st.Running && l.Running {
			st.Running, st.RunningOn = true, l.Owner
		}
	}
	return st
}

// LeaderOf returns the owner of key's live lease as last seen by this
// replica, or "" when none is live or leases are off.
func (s *Supervisor) LeaderOf(key string) string {
	if !s.leased {
		return ""
	}
	s.mu.Lock()
	ks := s.keys[key]
	everywhere := ks != nil && ks.configured && ks.job.Mode == Everywhere
	s.unlock()
	if everywhere {
		return ""
	}
	return s.keeper.LeaderOf(key)
}

// PeerKeys returns the keys a live peer leads, as last seen, including keys
// this replica has no configuration for — so the application can leave
// related work (notifications, queued messages) to that peer. It returns
// nil when leases are off.
func (s *Supervisor) PeerKeys() []string {
	if !s.leased {
		return nil
	}
	keys := slices.DeleteFunc(s.keeper.PeerKeys(), holdsRecordInfix) // Tenure's own records are no one's work
	if keys == nil {
		keys = []string{}
	}
	return keys
}

// Holds reports whether this replica holds key's lease and may run it.
// Always true in single-instance mode.
func (s *Supervisor) Holds(key string) bool {
	if !s.leased {
		return true
	}
	return s.keeper.Holds(key)
}

// running is what renewals report to peers: whether each term's key has
// a runner running, read under one lock for all of them.
func (s *Supervisor) running(terms []hold.Term) []bool {
	s.mu.Lock()
	defer s.unlock()
	flags := make([]bool, len(terms))
	for i, t := range terms {
		ks := s.keys[t.Key]
		if ks != nil && ks.member != nil && s.stopping {
			continue // draining: peers stop counting this worker
		}
		flags[i] = ks != nil && ks.run != nil && !ks.run.stopped()
	}
	return flags
}
