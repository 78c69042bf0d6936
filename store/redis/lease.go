package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
)

// maxBatch is the most terms one script call renews or releases. Larger
// batches are split into several calls sent in one pipeline: still one
// round trip, but Redis serves other clients between the calls instead of
// stalling for the whole batch.
const maxBatch = 1000

// defaultListPage is the most records one List script call reads. A page
// of 5,000 keeps Redis busy for a few milliseconds; 100,000 leases in one
// call would block every other client for a large part of a second.
const defaultListPage = 5000

// Acquire starts a new term of req.Key for req.Owner when the key is free.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, err
	}
	if s.isClosed() {
		return store.AcquireResult{}, store.ErrClosed
	}
	// The term starts on its own record; the owner's session is opened
	// now if the Store knows none, so that the renewal that puts the term
	// on it is one script call (a slow network leaves a call room for
	// little more).
	if _, err := s.session(ctx, req.Owner, req.TTL); err != nil {
		return store.AcquireResult{}, s.wrap("acquire", err)
	}
	reply, err := acquireScript.Run(ctx, s.client, s.keys,
		req.Key, req.Owner, micros(req.TTL), micros(req.Grace), flag(req.Running), s.channel, flag(s.seen.Load()), newTag(),
	).Slice()
	if err != nil {
		return store.AcquireResult{}, s.wrap("acquire", err)
	}
	s.seen.Store(true)
	res, err := parseAcquire(req.Key, reply)
	if err == nil && res.Acquired && len(reply) == 6 {
		// The record left the session it was on.
		var (
			id int64
			v  sessionbook.Version
		)
		if id, v, err = readMove(reply[2:]); err == nil {
			s.book.Left(id, v, store.Term{Key: req.Key})
		}
	}
	if err != nil {
		return store.AcquireResult{}, fmt.Errorf("redis: acquire %q: %w", req.Key, err)
	}
	if res.Acquired {
		s.book.Acquired(req.Owner, req.TTL, req.Key, res.Epoch, req.Running)
	}
	return res, nil
}

func parseAcquire(key string, reply []any) (store.AcquireResult, error) {
	if len(reply) < 2 {
		return store.AcquireResult{}, fmt.Errorf("unexpected reply %v", reply)
	}
	epoch, err := toInt(reply[1])
	if err != nil {
		return store.AcquireResult{}, err
	}
	if acquired, _ := reply[0].(int64); acquired == 1 {
		if len(reply) != 2 && len(reply) != 6 {
			return store.AcquireResult{}, fmt.Errorf("unexpected reply %v", reply)
		}
		return store.AcquireResult{Acquired: true, Epoch: epoch}, nil
	}
	if len(reply) != 6 {
		return store.AcquireResult{}, fmt.Errorf("unexpected reply %v", reply)
	}
	owner, _ := reply[2].(string)
	left, _ := reply[3].(int64)
	running, _ := reply[4].(int64)
	live, _ := reply[5].(int64)
	return store.AcquireResult{Holder: store.Lease{
		Key:      key,
		Owner:    owner,
		Epoch:    epoch,
		Live:     live == 1,
		Running:  running == 1,
		TimeLeft: time.Duration(left) * time.Microsecond,
	}}, nil
}

// Renew extends every listed term of owner in one script call: on the
// owner's session alone when the Store knows it holds exactly those terms,
// else term by term (session.go).
func (s *Store) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if err := store.ValidateRenew(owner, ttl, items); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	out := make([]bool, len(items))
	if len(items) == 0 {
		return out, nil
	}
	renewed, err := s.renew(ctx, owner, ttl, items)
	if err != nil {
		return nil, s.wrap("renew", err)
	}
	for i, it := range items {
		out[i] = renewed == nil || renewed[store.Term{Key: it.Key, Epoch: it.Epoch}]
	}
	return out, nil
}

// Release ends every listed current term of owner now, in one round trip,
// and publishes a Released event for each.
func (s *Store) Release(ctx context.Context, owner string, terms []store.Term) error {
	if err := store.ValidateRelease(owner, terms); err != nil {
		return err
	}
	if s.isClosed() {
		return store.ErrClosed
	}
	if len(terms) == 0 {
		return nil
	}
	var calls [][]any
	for start := 0; start < len(terms); start += maxBatch {
		chunk := terms[start:min(start+maxBatch, len(terms))]
		args := make([]any, 0, 3+2*len(chunk))
		args = append(args, owner, s.channel, newTag())
		for _, t := range chunk {
			args = append(args, t.Key, strconv.FormatInt(t.Epoch, 10))
		}
		calls = append(calls, args)
	}
	replies, err := s.runBatches(ctx, releaseScript, calls)
	if err != nil {
		return s.wrap("release", err)
	}
	s.book.Left(0, sessionbook.Version{}, terms...) // acquired, never on a session
	for i, r := range replies {
		// Each call moved each session it took terms off one version.
		chunk := terms[i*maxBatch : min((i+1)*maxBatch, len(terms))]
		moves, ok := r.([]any)
		if !ok || len(moves) == 0 || (len(moves)-1)%4 != 0 {
			return fmt.Errorf("redis: release: unexpected reply %v", r)
		}
		for j := 1; j < len(moves); j += 4 {
			id, v, err := readMove(moves[j : j+4])
			if err != nil {
				return fmt.Errorf("redis: release: %w", err)
			}
			s.book.Left(id, v, chunk...)
		}
	}
	return nil
}

// runBatches runs script once per argument list. One list is one EVALSHA
// (EVAL when the server lost its script cache); several go in one pipeline,
// which is reloaded and sent again when the server answers NOSCRIPT. A
// second send is harmless: a release already made changes nothing, and a
// renewal's calls run again put nothing on twice, though they move the
// session's version further, so the Book does not learn it (session.go).
func (s *Store) runBatches(ctx context.Context, script *goredis.Script, calls [][]any) ([]any, error) {
	if len(calls) == 1 {
		v, err := script.Run(ctx, s.client, s.keys, calls[0]...).Result()
		if err != nil {
			return nil, err
		}
		return []any{v}, nil
	}
	for attempt := 0; ; attempt++ {
		cmds, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, args := range calls {
				script.EvalSha(ctx, p, s.keys, args...)
			}
			return nil
		})
		if err != nil && attempt == 0 && anyNoScript(cmds) {
			if err := script.Load(ctx, s.client).Err(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]any, len(cmds))
		for i, c := range cmds {
			out[i] = c.(*goredis.Cmd).Val()
		}
		return out, nil
	}
}

func anyNoScript(cmds []goredis.Cmder) bool {
	for _, c := range cmds {
		if goredis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// List returns every record whose key starts with prefix (byte-exact),
// sorted by key. Each page of records is read atomically with the
// server's clock in one script call (up to 5,000 records); pages follow each other by key, so a
// large namespace never stalls Redis for one long script.
func (s *Store) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if s.isClosed() {
		return nil, store.ErrClosed
	}
	lo, hi := lexRange(prefix)
	var leases []store.Lease
	for {
		reply, err := listScript.Run(ctx, s.client, s.keys, lo, hi, s.listPage).Slice()
		if err != nil {
			return nil, s.wrap("list", err)
		}
		if len(reply) < 3 || len(reply)%2 != 1 {
			return nil, fmt.Errorf("redis: list: unexpected reply of %d elements", len(reply))
		}
		head, err := ints([]any{reply[0], reply[2]}) // now, number of sessions
		if err == nil && (head[1] < 0 || 3+2*int(head[1]) > len(reply)) {
			err = fmt.Errorf("%d sessions in a reply of %d elements", head[1], len(reply))
		}
		var ends map[int64]int64
		if err == nil {
			ends, err = sessionEnds(reply[len(reply)-2*int(head[1]):])
		}
		if err != nil {
			return nil, fmt.Errorf("redis: list: %w", err)
		}
		records := reply[3 : len(reply)-2*int(head[1])]
		if leases == nil {
			leases = make([]store.Lease, 0, len(records)/2)
		}
		for i := 0; i < len(records); i += 2 {
			key, _ := records[i].(string)
			rec, _ := records[i+1].(string)
			l, err := decodeRecord(key, rec, head[0], ends)
			if err != nil {
				return nil, fmt.Errorf("redis: list: %w", err)
			}
			leases = append(leases, l)
		}
		next, _ := reply[1].(string)
		if next == "" {
			return leases, nil
		}
		lo = "[" + next
	}
}

// lexRange turns a byte prefix into a ZRANGEBYLEX range: from the prefix
// itself (inclusive) to the first string after every string with that
// prefix (exclusive).
func lexRange(prefix string) (lo, hi string) {
	if prefix == "" {
		return "-", "+"
	}
	succ := []byte(prefix)
	for len(succ) > 0 && succ[len(succ)-1] == 0xff {
		succ = succ[:len(succ)-1]
	}
	if len(succ) == 0 {
		return "[" + prefix, "+"
	}
	succ[len(succ)-1]++
	return "[" + prefix, "(" + string(succ)
}

// sessionEnds reads the (id, packed session) pairs of listScript's
// reply: the end of each session a record may be on. A session that is
// gone is not there, so its records read as they stand: live for a
// century, an end unknown.
func sessionEnds(pairs []any) (map[int64]int64, error) {
	ends := make(map[int64]int64, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		id, err := toInt(pairs[i])
		packed, _ := pairs[i+1].(string)
		expiry, _, _ := strings.Cut(packed, ",")
		if err == nil {
			ends[id], err = toInt(expiry)
		}
		if err != nil {
			return nil, fmt.Errorf("session %v %q: %w", pairs[i], packed, err)
		}
	}
	return ends, nil
}

// decodeRecord parses a packed record (see scripts.go) into a Lease with
// time left computed from the server's now, in microseconds. A record on
// a session (session.go) takes its session's end from ends, when it is
// there; a nil ends reads every record as it stands, as a version without
// sessions does.
func decodeRecord(key, rec string, now int64, ends map[int64]int64) (store.Lease, error) {
	f := strings.SplitN(rec, ",", 5)
	if len(f) != 5 {
		return store.Lease{}, fmt.Errorf("corrupt record for key %q", key)
	}
	epoch, err1 := strconv.ParseInt(f[0], 10, 64)
	expiry, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return store.Lease{}, fmt.Errorf("corrupt record for key %q: %w", key, err)
	}
	if end, ok := ends[expiry-onSession]; ok && expiry >= onSession {
		expiry = end
	}
	released := f[2] == "1"
	return store.Lease{
		Key:      key,
		Owner:    f[4],
		Epoch:    epoch,
		Live:     !released && f[4] != "" && now < expiry, // "" = revoked
		Released: released,
		Running:  f[3] == "1",
		TimeLeft: time.Duration(expiry-now) * time.Microsecond,
	}, nil
}

// Revoke moves key's live term to a new epoch owned by nobody, keeping its
// expiry: the holder is fenced at its next renewal, and peers may acquire
// once that expiry + grace has passed. It reports false when the key has no
// live term.
func (s *Store) Revoke(ctx context.Context, key string) (bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if s.isClosed() {
		return false, store.ErrClosed
	}
	reply, err := revokeScript.Run(ctx, s.client, s.keys, key, newTag()).Slice()
	if err != nil {
		return false, s.wrap("revoke", err)
	}
	if len(reply) == 5 {
		id, v, err := readMove(reply[1:])
		if err != nil {
			return false, fmt.Errorf("redis: revoke %q: %w", key, err)
		}
		s.book.Left(id, v, store.Term{Key: key})
	}
	return len(reply) > 0 && reply[0] == int64(1), nil
}

func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis: %s: %w", op, errors.Join(store.ErrClosed, err))
	}
	return fmt.Errorf("redis: %s: %w", op, denied(err))
}

// denied marks as store.ErrDenied the replies by which Redis refuses
// credentials or rights: NOAUTH (no AUTH sent), WRONGPASS and NOPERM (an
// ACL user without the command or the keys).
func denied(err error) error {
	var re goredis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, code := range []string{"NOAUTH ", "WRONGPASS ", "NOPERM "} {
			if strings.HasPrefix(msg, code) {
				return store.Denied(err)
			}
		}
	}
	return err
}

// micros converts a duration to whole microseconds, the unit of the
// scripts' clock; the validated minimum of 1ms keeps it positive.
func micros(d time.Duration) int64 { return d.Microseconds() }

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// toInt reads an epoch or timestamp that a script returned as a decimal
// string (exact beyond 2^53) or as an integer.
func toInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad integer %q: %w", v, err)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("unexpected %T %v where an integer was expected", v, v)
	}
}
