// Package sessionbook keeps what a lease store knows of its sessions,
// so that a renewal of a process's terms can be one write however many
// keys it holds.
//
// A session is a row of the store's session table (a field of a hash on
// Redis) with an expiry, a version and a tag; a lease record on a session
// takes the session's expiry. An acquisition starts a term on its own record, as without sessions; the
// next renewal that lists it puts it on its owner's session for its TTL.
// Every change to which terms are on a session — a term put on or taken
// off, by this store or anyone else — moves the session's version up and
// draws it a new random tag, in the same statement, which also keeps the
// tag it had. The version orders the changes; the tags chain them, telling
// apart two changes that reached one version, as one lost in a crash or a
// failover and one made after it do.
//
// The Book records, per session, the terms on it and the version they are
// known at, and the terms acquired through the store and not yet on it
// (pending). A renewal may write the session alone (and put the pending
// terms it lists on it) when it lists every term on the session, each
// once, and nothing the Book does not know, and the store finds the
// session at the version the Book knows. Any other renewal goes term by
// term, and hands the Book the session as it found it.
//
// Versions a call produced come back in any order; the Book counts a
// session known only up to the first gap. A change the Book does not hear
// of (another store's, or one whose answer was lost) leaves the session at
// a version the Book does not know, so the next renewal goes term by
// term: the Book never claims to know a session it might not.
package sessionbook

import (
	"fmt"
	"sync"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Book is what one store knows of its sessions. It is safe for concurrent
// use; the zero value is ready.
type Book struct {
	mu       sync.Mutex
	sessions map[sessionKey]*session
	opening  sync.Mutex // one Open at a time
}

type sessionKey struct {
	owner string
	ttl   time.Duration
}

type session struct {
	id int64 // 0: none known to be live
	// version and tag are the session's as far as the Book knows it
	// whole; ahead holds changes that came back past a gap, by version
	// (a change at -1: the chain broke, learn the session afresh).
	version, tag int64
	ahead        map[int64]Version
	on           map[string]*term // the terms on the session
	pending      map[string]*term // acquired, not yet on it
	pass         uint64           // numbers the renewals checked
}

type term struct {
	epoch   int64
	running bool
	pass    uint64 // the last check that found it listed
	missed  int    // pending: checks in a row that did not list it
	// unsure: a renewal set to write its runner state has not been
	// confirmed; the store may hold either state, so the next renewal
	// writes it whatever it is.
	unsure bool
}

// Term is a term on a session, as a store reads it.
type Term struct {
	Key     string
	Epoch   int64
	Running bool
}

func (b *Book) get(owner string, ttl time.Duration) *session {
	k := sessionKey{owner, ttl}
	ss := b.sessions[k]
	if ss == nil {
		if b.sessions == nil {
			b.sessions = make(map[sessionKey]*session)
		}
		ss = &session{on: map[string]*term{}, pending: map[string]*term{}}
		b.sessions[k] = ss
	}
	return ss
}

// Session returns owner's session for ttl, or 0 when it has none.
func (b *Book) Session(owner string, ttl time.Duration) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.get(owner, ttl).id
}

// Version is a session's version and tag, and Prev the tag it had at the
// version before (for a change the Book hears of from a call: Left).
type Version struct{ N, Tag, Prev int64 }

// broken marks a session the Book cannot know until it learns it again.
var broken = map[int64]Version{-1: {}}

// Opened records a new, empty session of owner for ttl at v, the one the
// store uses from now on. Terms on a session the Book had before are
// forgotten (it died, or is left to die).
func (b *Book) Opened(owner string, ttl time.Duration, id int64, v Version) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := b.get(owner, ttl)
	ss.id, ss.version, ss.tag, ss.ahead, ss.on = id, v.N, v.Tag, nil, map[string]*term{}
}

// Open returns owner's session for ttl, opening one with open when the
// Book knows none. Opens run one at a time, so that calls that find no
// session at once open one between them, not one each.
func (b *Book) Open(owner string, ttl time.Duration, open func() (int64, Version, error)) (int64, error) {
	if id := b.Session(owner, ttl); id != 0 {
		return id, nil
	}
	b.opening.Lock()
	defer b.opening.Unlock()
	if id := b.Session(owner, ttl); id != 0 {
		return id, nil // opened meanwhile
	}
	id, v, err := open()
	if err != nil {
		return 0, err
	}
	b.Opened(owner, ttl, id, v)
	return id, nil
}

// OnLiveSession runs a renewal term by term, slow, on owner's session for
// ttl as open gives it. When slow finds that session dead or gone (found
// false, nothing written), the Book forgets it and slow runs once more on
// the one open gives then, which opens another.
func (b *Book) OnLiveSession(owner string, ttl time.Duration, open func() (int64, error),
	slow func(id int64) (renewed map[store.Term]bool, found bool, err error)) (map[store.Term]bool, error) {
	for try := 1; ; try++ {
		id, err := open()
		if err != nil {
			return nil, err
		}
		renewed, found, err := slow(id)
		switch {
		case err != nil:
			return nil, err
		case found:
			return renewed, nil
		case try == 2:
			return nil, fmt.Errorf("session %d of %s ended as it was opened", id, owner)
		}
		b.Dead(owner, ttl, id)
	}
}

// Distinct returns items with each term (key and epoch) once, in the order
// of its first item and with the runner state of its last: a statement or
// script that joins the items to records then meets each term once.
func Distinct(items []store.RenewItem) []store.RenewItem {
	index := make(map[store.Term]int, len(items))
	out := make([]store.RenewItem, 0, len(items))
	for _, it := range items {
		t := store.Term{Key: it.Key, Epoch: it.Epoch}
		if i, ok := index[t]; ok {
			out[i].Running = it.Running
			continue
		}
		index[t] = len(out)
		out = append(out, it)
	}
	return out
}

// Dead forgets owner's session id for ttl, which a renewal found dead or
// gone: the store opens another.
func (b *Book) Dead(owner string, ttl time.Duration, id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ss := b.get(owner, ttl); ss.id == id {
		ss.id = 0
	}
}

// Acquired records a term of owner acquired for ttl through the store, on
// its own record: the next renewal that lists it may put it on the
// session.
func (b *Book) Acquired(owner string, ttl time.Duration, key string, epoch int64, running bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.get(owner, ttl).pending[key] = &term{epoch: epoch, running: running}
}

// Fast is a renewal that may write the session alone.
type Fast struct {
	ID      int64
	Version Version
	// Changed are listed terms on the session whose runner state changed;
	// Join are listed pending terms, to put on the session.
	Changed, Join []store.RenewItem
}

// Check says whether a renewal of items may write owner's session for ttl
// alone (see the package doc), and what it must write.
func (b *Book) Check(owner string, ttl time.Duration, items []store.RenewItem) (Fast, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := b.get(owner, ttl)
	if ss.id == 0 || len(ss.ahead) > 0 || len(items) < len(ss.on) {
		return Fast{}, false
	}
	ss.pass++
	f := Fast{ID: ss.id, Version: Version{N: ss.version, Tag: ss.tag}}
	listed := 0
	for _, it := range items {
		t, on := ss.on[it.Key]
		if !on {
			t = ss.pending[it.Key]
		}
		if t == nil || t.epoch != it.Epoch || t.pass == ss.pass {
			return Fast{}, false // unknown, or named twice
		}
		t.pass = ss.pass
		switch {
		case !on:
			f.Join = append(f.Join, it)
		case t.running != it.Running || t.unsure:
			f.Changed = append(f.Changed, it)
			t.unsure = true // until Renewed hears the write went through
		}
		if on {
			listed++
		}
	}
	// A pending term two renewals in a row did not list was given up
	// before it joined (lost, or left to expire): forget it, or the Book
	// would keep every such term of a long-lived process. One forgotten
	// while still held only sends its next renewal term by term.
	for key, t := range ss.pending {
		if t.pass == ss.pass {
			t.missed = 0
		} else if t.missed++; t.missed >= 2 {
			delete(ss.pending, key)
		}
	}
	if listed < len(ss.on) {
		return Fast{}, false // a term no renewal wants: the slow path takes it off
	}
	return f, true
}

// Answers is what a renewal of f's session alone answers for items, once
// the store put joined (of f.Join) on it: nil when every item was renewed,
// else the terms renewed (a term acquired since may have been lost).
func (f Fast) Answers(items []store.RenewItem, joined map[store.Term]bool) map[store.Term]bool {
	if len(joined) == len(f.Join) {
		return nil
	}
	renewed := make(map[store.Term]bool, len(items))
	for _, it := range items {
		renewed[store.Term{Key: it.Key, Epoch: it.Epoch}] = true
	}
	for _, it := range f.Join {
		t := store.Term{Key: it.Key, Epoch: it.Epoch}
		renewed[t] = joined[t]
	}
	return renewed
}

// Renewed records a renewal of f's session alone, which moved it to v and
// put joined (of f.Join) on it.
func (b *Book) Renewed(owner string, ttl time.Duration, f Fast, v Version, joined map[store.Term]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := b.get(owner, ttl)
	for _, it := range f.Join {
		if t := ss.pending[it.Key]; t != nil && t.epoch == it.Epoch {
			delete(ss.pending, it.Key) // on the session now, or lost
		}
	}
	if ss.id != f.ID || ss.version != f.Version.N || ss.tag != f.Version.Tag || len(ss.ahead) > 0 {
		// A change came back meanwhile, made after this renewal: the
		// Book cannot tell what the session holds; the next renewal
		// learns it afresh.
		if ss.id == f.ID {
			ss.ahead = broken
		}
		return
	}
	for _, it := range f.Changed {
		if t := ss.on[it.Key]; t != nil && t.epoch == it.Epoch {
			t.running, t.unsure = it.Running, false
		}
	}
	for _, it := range f.Join {
		if joined[store.Term{Key: it.Key, Epoch: it.Epoch}] {
			ss.on[it.Key] = &term{epoch: it.Epoch, running: it.Running}
		}
	}
	ss.version, ss.tag = v.N, v.Tag
}

// Learned records session id whole, as a renewal found it at v.
func (b *Book) Learned(owner string, ttl time.Duration, id int64, v Version, terms []Term) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := b.get(owner, ttl)
	if ss.id == id && v.N < ss.version {
		return // the Book knows a later version whole
	}
	// Changes that came back past a gap were made to the terms this
	// replaces: forget them too, so that the next renewal learns afresh.
	ss.id, ss.version, ss.tag, ss.ahead = id, v.N, v.Tag, nil
	ss.on = make(map[string]*term, len(terms))
	for _, t := range terms {
		ss.on[t.Key] = &term{epoch: t.Epoch, running: t.Running}
		if p := ss.pending[t.Key]; p != nil && p.epoch == t.Epoch {
			delete(ss.pending, t.Key)
		}
	}
}

// Left records that terms left session id (0: their own records) through
// one call of this store that moved the session to v: a release, a
// revocation, or an acquisition of a key. A term of epoch 0 is the key's
// term, whatever its epoch.
func (b *Book) Left(id int64, v Version, terms ...store.Term) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ss := range b.sessions {
		for _, tm := range terms {
			if t := ss.pending[tm.Key]; id == 0 && t != nil && (t.epoch == tm.Epoch || tm.Epoch == 0) {
				delete(ss.pending, tm.Key)
			}
		}
		if id == 0 || ss.id != id || v.N <= ss.version {
			continue
		}
		for _, tm := range terms {
			if t := ss.on[tm.Key]; t != nil && (t.epoch == tm.Epoch || tm.Epoch == 0) {
				delete(ss.on, tm.Key)
			}
		}
		if ss.ahead == nil {
			ss.ahead = map[int64]Version{}
		}
		ss.ahead[v.N] = v
		for {
			next, ok := ss.ahead[ss.version+1]
			if !ok {
				break
			}
			if next.Prev != ss.tag {
				// Not a change of the session the Book knows: one it never
				// heard of came between, on a history a crash rewrote.
				ss.ahead = broken
				break
			}
			delete(ss.ahead, next.N)
			ss.version, ss.tag = next.N, next.Tag
		}
	}
}

// Unlisted returns the terms the Book knows on owner's session id for
// ttl that listed does not name: a renewal that goes term by term takes
// them off before it renews the session, so that none it failed to take
// off is renewed with it.
func (b *Book) Unlisted(owner string, ttl time.Duration, id int64, listed map[store.Term]bool) []store.Term {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := b.get(owner, ttl)
	if ss.id != id {
		return nil
	}
	var out []store.Term
	for key, t := range ss.on {
		if tm := (store.Term{Key: key, Epoch: t.epoch}); !listed[tm] {
			out = append(out, tm)
		}
	}
	return out
}
