package poolmodel

import (
	"container/heap"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/internal/engine/balance"
)

// round is a worker's turn: a regular round (renew and plan) or a recheck
// the policy asked for (plan only).
type round struct {
	at      time.Duration
	who     int32
	recheck bool
}

// roundQueue is a min-heap of rounds by time, then worker, so that runs
// repeat exactly.
type roundQueue []round

func (q roundQueue) Len() int { return len(q) }
func (q roundQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].who < q[j].who
}
func (q roundQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *roundQueue) Push(x any)   { *q = append(*q, x.(round)) }
func (q *roundQueue) Pop() any {
	old := *q
	r := old[len(old)-1]
	*q = old[:len(old)-1]
	return r
}

// runRound is one worker's turn. A regular round renews every lease the
// worker holds (one call in the engine, so one instant here) and plans
// once the worker has been a member for a round; a recheck plans only.
func (m *Model) runRound(r round) {
	w := m.workers[r.who]
	if !w.up {
		return // stopped: its pending turns lapse
	}
	if r.recheck {
		if w.recheck != r.at {
			return // superseded by an earlier recheck, which planned again
		}
		w.recheck = none
	} else {
		w.lastRenew = r.at
		heap.Push(&m.rounds, round{at: r.at + m.cfg.Round, who: w.idx})
	}
	if m.now-w.joined < m.cfg.Round {
		return // not settled: it has not yet seen the peers that started with it
	}
	m.plan(w)
}

// plan runs the worker's policy on the table as it is now and carries the
// plan out: releases free their keys, claims take free keys.
func (m *Model) plan(w *worker) {
	held := make(map[string]time.Time, w.held)
	for i, n := range m.owners.Of {
		if n == w.number() {
			held[m.keys[i]] = epoch.Add(m.acquired[i])
		}
	}
	v := balance.View{Self: w.id, Now: epoch.Add(m.now), Workers: m.members(), Keys: m.keys, Owners: m.owners, HeldSince: held}
	start := time.Now()
	p := w.policy.Plan(v)
	m.totals.PlanTime += time.Since(start)
	m.totals.Plans++
	for _, k := range p.Release {
		if i := m.index(k); m.owners.Of[i] == w.number() {
			m.totals.Released++
			m.free(i)
		}
	}
	for _, k := range p.Claim {
		m.claim(m.index(k), w)
	}
	if !p.Recheck.IsZero() {
		at := max(p.Recheck.Sub(epoch), m.now)
		if w.recheck == none || at < w.recheck {
			w.recheck = at
			heap.Push(&m.rounds, round{at: at, who: w.idx, recheck: true})
		}
	}
}

// members are the workers whose membership lease is live: those up, and
// crashed ones until their last renewal's TTL runs out.
func (m *Model) members() []balance.Worker {
	var out []balance.Worker
	for _, w := range m.workers {
		if w.up || m.now < w.memberUntil {
			out = append(out, balance.Worker{ID: w.id, Weight: 1})
		}
	}
	return out
}

// index is the position of a key the model made: its number.
func (m *Model) index(key string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "acct-"))
	if err != nil || n < 0 || n >= len(m.keys) || m.keys[n] != key {
		panic("poolmodel: a plan named a key the pool does not have: " + key)
	}
	return n
}

// claim is an acquisition: granted if the key is free, and then a run
// starts on w.
func (m *Model) claim(i int, w *worker) {
	if m.owners.Of[i] != 0 {
		m.totals.Refused++
		return
	}
	if m.idleSince[i] != none {
		m.spells.unowned = append(m.spells.unowned, spell{end: m.now, length: m.now - m.idleSince[i]})
	}
	if m.crashedSince[i] != none {
		m.spells.recovered = append(m.spells.recovered, spell{end: m.now, length: m.now - m.crashedSince[i]})
		m.crashedSince[i] = none
	}
	m.grant(i, w)
	m.totals.Claims++
	if last := m.lastRunner[i]; last != none && last != w.idx {
		m.totals.Moves++
		if m.lastMove[i] != none && m.now-m.lastMove[i] < m.cfg.MinHold {
			m.totals.Bounces++
		}
		m.lastMove[i] = m.now
	}
	m.lastRunner[i] = w.idx
}

// grant records w as key i's holder from now.
func (m *Model) grant(i int, w *worker) {
	m.owners.Of[i], m.acquired[i] = w.number(), m.now
	m.idleSince[i] = none
	w.held++
}

// free ends key i's lease; its run, if any, ends now.
func (m *Model) free(i int) {
	m.workers[m.owners.Of[i]-1].held--
	m.owners.Of[i] = 0
	if m.idleSince[i] == none {
		m.idleSince[i] = m.now
	}
}
