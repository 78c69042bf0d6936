package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
)

// Sessions: one small write per renewal, however many terms.
//
// A term starts on its own record, as without sessions; the first renewal
// that lists it puts it on a session of its owner and TTL, a field of
// {ns}:sessions with an expiry, a version, a tag and a count of the
// records on it. A record on a session holds the expiry onSession + the
// session's id: a date a century ahead to a version of this package
// without sessions, which therefore never takes the key over, and to this
// one a pointer to the session whose expiry is the term's.
//
// Every change to which terms are on a session moves its version up and
// draws a new random tag, in the same script: a renewal that puts terms on
// or moves them off, a release, a revocation, an acquisition of a key
// whose record is on one. The Store's sessionbook.Book knows the terms on
// its sessions and the (version, tag) they are known at. A renewal that
// lists exactly those, and at most maxBatch terms acquired since or whose
// runner state changed, runs renewFastScript: it reads and writes the
// session alone (and those records), if it finds the session at that
// version. Any other renewal goes term by term (renewSlow): it moves every
// listed term still the owner's and live onto a new session, leaving the
// terms it does not list on the old one, which nobody renews any more, so
// that a term its holder gave up on ends when the session it was on does,
// rather than living as long as its owner. No index of a session's
// records is needed, and no term's end is ever moved sooner: the old
// session keeps whatever expiry any renewal gave it. Acquisitions never
// extend a session; scripts are atomic, so none sees another half done.
//
// A session the last record left is deleted; one its Store cannot renew in
// time dies with every term on it: peers see each record expire with it
// and wait out the grace as after a crash, and the Store's next renewal
// reports them lost and moves the rest onto a new session.

// onSession is 2126-01-01 00:00 UTC in microseconds: a record whose expiry
// is onSession + id is on session id. Exact in Lua's doubles (below 2^53)
// for any id newSessionID draws. No term's own expiry reaches it until
// 2116, when now + store.MaxTTL does.
const onSession = 4_922_899_200_000_000

// onSessionLua is onSession as the scripts' prelude writes it (a test
// checks that they agree).
const onSessionLua = "4922899200000000"

// fullRenewalEvery is how long a session is renewed alone before a renewal
// goes term by term anyway. Scripts of this version keep every session's
// version true, but a version without sessions may revoke a term on one
// without moving it (it keeps the record's expiry, which points at the
// session): only a renewal term by term tells the holder. This bounds how
// long such a revocation goes unheard, for about one record write per
// term a minute. A variable for the tests.
var fullRenewalEvery = time.Minute

// slowRenewals counts the renewals that went term by term, for the tests
// that check when they do.
var slowRenewals atomic.Int64

// newTag draws a session tag: random, below 2^52 so that Lua keeps it
// exact, and never 0, which stands for "none" as a new session's previous
// tag.
func newTag() string { return strconv.FormatInt(rand.Int64N(1<<52)+1, 10) }

// newSessionID draws a session id: random, so that a renewal can name the
// session it makes in every call it pipelines, and below 2^51, so that
// onSession + id stays exact in Lua's doubles. The scripts that make a
// session refuse an id another owner's session has (errIDTaken).
func newSessionID() int64 { return rand.Int64N(1<<51) + 1 }

// errIDTaken is a session id another owner's session has.
var errIDTaken = errors.New("session id taken")

// session returns owner's session for ttl as the Book knows it, opening
// one when it knows none.
func (s *Store) session(ctx context.Context, owner string, ttl time.Duration) (int64, error) {
	return s.book.Open(owner, ttl, func() (int64, sessionbook.Version, error) {
		var v sessionbook.Version
		id, err := retryTaken(func(id int64) error {
			reply, err := openSessionScript.Run(ctx, s.client, s.keys, id, owner, micros(ttl), newTag()).Slice()
			if err != nil {
				return fmt.Errorf("open a session: %w", err)
			}
			if len(reply) == 1 && reply[0] == int64(0) {
				return errIDTaken
			}
			xs, err := ints(reply)
			if err != nil || len(xs) != 3 {
				return fmt.Errorf("open a session: unexpected reply %v", reply)
			}
			v = sessionbook.Version{N: xs[1], Tag: xs[2]}
			return nil
		})
		if err == nil {
			s.fullRenewalDone(owner, ttl)
		}
		return id, v, err
	})
}

// retryTaken calls try with a new session id, and once more with another
// should the first be taken.
func retryTaken(try func(id int64) error) (int64, error) {
	for attempt := 1; ; attempt++ {
		id := newSessionID()
		err := try(id)
		if err == nil || !errors.Is(err, errIDTaken) || attempt == 2 {
			return id, err
		}
	}
}

// renew renews items of owner: the session alone (and the terms acquired
// since) when the Book knows it holds exactly the terms listed, else term
// by term onto a new session. It returns the terms renewed, or nil when
// every one was.
func (s *Store) renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) (map[store.Term]bool, error) {
	// A fast renewal with many terms to write goes term by term instead,
	// in calls of maxBatch that let Redis serve others between them.
	if f, ok := s.book.Check(owner, ttl, items); ok && len(f.Join)+len(f.Changed) <= maxBatch && !s.fullRenewalDue(owner, ttl) {
		renewed, done, err := s.renewFast(ctx, owner, ttl, f, items)
		if err != nil || done {
			return renewed, err
		}
	}
	slowRenewals.Add(1)
	var renewed map[store.Term]bool
	_, err := retryTaken(func(id int64) (err error) {
		renewed, err = s.renewSlow(ctx, owner, ttl, id, items)
		return err
	})
	return renewed, err
}

// renewFast renews the session of f alone, with the terms to put on it;
// done false means the session was not at the version the Book knows (or
// dead), and nothing was written. renewed is nil when every item was.
func (s *Store) renewFast(ctx context.Context, owner string, ttl time.Duration, f sessionbook.Fast, items []store.RenewItem) (renewed map[store.Term]bool, done bool, err error) {
	args := make([]any, 0, 7+3*(len(f.Changed)+len(f.Join)))
	args = append(args, f.ID, owner, micros(ttl), f.Version.N, strconv.FormatInt(f.Version.Tag, 10), newTag(), len(f.Changed))
	args = appendItems(args, f.Changed)
	args = appendItems(args, f.Join)
	reply, err := renewFastScript.Run(ctx, s.client, s.keys, args...).Slice()
	if err != nil {
		return nil, false, err
	}
	if len(reply) > 0 && reply[0] == int64(0) {
		return nil, false, nil
	}
	v, err := ints(reply[:3])
	if err != nil || len(reply)%2 != 1 {
		return nil, false, fmt.Errorf("unexpected reply %v (%w)", reply, err)
	}
	joined := make(map[store.Term]bool, len(f.Join))
	for i := 3; i < len(reply); i += 2 {
		t, err := readTerm(reply[i], reply[i+1])
		if err != nil {
			return nil, false, err
		}
		joined[t] = true
	}
	s.book.Renewed(owner, ttl, f, sessionbook.Version{N: v[1], Tag: v[2]}, joined)
	return f.Answers(items, joined), true, nil
}

// renewSlow renews items term by term onto session id, new, which its
// first call makes: every listed term of owner still its, unreleased and
// live goes on it, from its own record or another session of owner. The
// terms no renewal lists stay where they are, on sessions no longer
// renewed, and end with them — a term its holder gave up on without a
// release, or one a version without sessions revoked — rather than living
// as long as the owner. Items go maxBatch to a call, all calls in one
// pipeline.
//
// The Book learns the session only if the calls' versions chain, one
// after the other from the first: no change by another came between.
func (s *Store) renewSlow(ctx context.Context, owner string, ttl time.Duration, id int64, items []store.RenewItem) (map[store.Term]bool, error) {
	items = sessionbook.Distinct(items)
	var calls [][]any
	for start := 0; start < len(items); start += maxBatch {
		chunk := items[start:min(start+maxBatch, len(items))]
		args := make([]any, 0, 4+3*len(chunk))
		calls = append(calls, appendItems(append(args, id, owner, micros(ttl), newTag()), chunk))
	}
	replies, err := s.runBatches(ctx, moveScript, calls)
	if err != nil {
		return nil, err
	}
	renewed := make(map[store.Term]bool, len(items))
	terms := make([]sessionbook.Term, 0, len(items))
	var last sessionbook.Version // the first call makes the session at 0, tag 0
	chained := true
	for i, r := range replies {
		reply, ok := r.([]any)
		if ok && len(reply) == 1 && reply[0] == int64(0) {
			if i == 0 {
				return nil, errIDTaken
			}
			return nil, fmt.Errorf("session %d ended during its first renewal", id)
		}
		if !ok || len(reply) < 4 || len(reply)%3 != 1 {
			return nil, fmt.Errorf("unexpected reply %v", r)
		}
		xs, err := ints(reply[1:4])
		if err != nil {
			return nil, err
		}
		chained = chained && xs[0] == last.N+1 && xs[2] == last.Tag
		last = sessionbook.Version{N: xs[0], Tag: xs[1]}
		for j := 4; j < len(reply); j += 3 {
			t, err := readTerm(reply[j], reply[j+1])
			if err != nil {
				return nil, err
			}
			renewed[t] = true
			terms = append(terms, sessionbook.Term{Key: t.Key, Epoch: t.Epoch, Running: reply[j+2] == "1"})
		}
	}
	if chained {
		s.book.Learned(owner, ttl, id, last, terms)
		s.fullRenewalDone(owner, ttl)
	}
	return renewed, nil
}

// appendItems appends key, epoch, running 0|1 of each item to a script's
// arguments.
func appendItems(args []any, items []store.RenewItem) []any {
	for _, it := range items {
		args = append(args, it.Key, strconv.FormatInt(it.Epoch, 10), flag(it.Running))
	}
	return args
}

// ints reads a script's integers (decimal strings or integers).
func ints(vals []any) ([]int64, error) {
	out := make([]int64, len(vals))
	for i, v := range vals {
		n, err := toInt(v)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// readMove reads a session a script moved: id, version, tag and previous
// tag.
func readMove(vals []any) (int64, sessionbook.Version, error) {
	xs, err := ints(vals)
	if err != nil || len(xs) != 4 {
		return 0, sessionbook.Version{}, fmt.Errorf("unexpected session %v (%w)", vals, err)
	}
	return xs[0], sessionbook.Version{N: xs[1], Tag: xs[2], Prev: xs[3]}, nil
}

// readTerm reads a key and its epoch from a script's reply.
func readTerm(key, epoch any) (store.Term, error) {
	k, ok := key.(string)
	e, err := toInt(epoch)
	if !ok || err != nil {
		return store.Term{}, fmt.Errorf("unexpected term %v %v", key, epoch)
	}
	return store.Term{Key: k, Epoch: e}, nil
}

// sessionKey names the session of an owner and a TTL.
type sessionKey struct {
	owner string
	ttl   time.Duration
}

// fullRenewalDue says whether owner's session for ttl was last opened or
// learned whole more than fullRenewalEvery ago.
func (s *Store) fullRenewalDue(owner string, ttl time.Duration) bool {
	s.fullMu.Lock()
	defer s.fullMu.Unlock()
	return time.Since(s.fullAt[sessionKey{owner, ttl}]) >= fullRenewalEvery
}

// fullRenewalDone records that owner's session for ttl was opened or
// learned whole now.
func (s *Store) fullRenewalDone(owner string, ttl time.Duration) {
	s.fullMu.Lock()
	defer s.fullMu.Unlock()
	if s.fullAt == nil {
		s.fullAt = map[sessionKey]time.Time{}
	}
	s.fullAt[sessionKey{owner, ttl}] = time.Now()
}
