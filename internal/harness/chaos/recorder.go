package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// recorder is the store a replica's supervisor uses: it logs the send
// time and outcome of every Acquire, Renew and Release, which the checker
// needs to bound when a peer may take over. Its control file plays the
// abandon fault on every store, and the network faults where no proxy
// can (SQLite, which has no network; a Redis Sentinel URL).
type recorder struct {
	inner store.Store
	log   *eventLog
	ctl   control

	mu      sync.Mutex
	livesOn []store.RenewItem // "abandon-renewing": the terms sent all the same
}

var (
	_ store.Store   = (*recorder)(nil)
	_ store.Watcher = watchingRecorder{}
)

// record wraps a replica's store in a recorder that has the store's push
// channel exactly when the store has one: the engine finds it by type
// assertion, and a replica on a store without one (MySQL) must poll, as it
// would in production, rather than fail to watch every round.
func record(inner store.Store, log *eventLog, ctl control) store.Store {
	r := &recorder{inner: inner, log: log, ctl: ctl}
	if w, ok := inner.(store.Watcher); ok {
		return watchingRecorder{recorder: r, w: w}
	}
	return r
}

var (
	errUnreachable = errors.New("chaos: store unreachable (injected)")
	errHeldBack    = errors.New("chaos: reply held back (injected)")
	// errReplyLost is a reply dropped at once; it wraps errHeldBack, since
	// for the checker both are calls that committed unanswered.
	errReplyLost = fmt.Errorf("chaos: reply lost (injected): %w", errHeldBack)
	// errAbandoned refuses, without a store call, an acquisition of the key
	// the replica abandons.
	errAbandoned = errors.New("chaos: key abandoned (injected)")
)

// renewAbandoning renews items but key's terms, which it leaves out of
// the store call and answers lost: the engine stops their runners at once
// and never lists them again, so each is a term its holder left on the
// store unreleased, logged as evAbandon with the call's send time. The
// rest are renewed and logged as usual, the call skipped if none is left.
// With m.stillRenew (tests only) the store is sent every item, and the
// log says what it would without: a store that kept the term alive.
func (r *recorder) renewAbandoning(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem, m ctlMode, sent int64) ([]bool, error) {
	var kept []store.RenewItem
	var at []int
	for i, it := range items {
		if it.Key == m.abandon {
			r.log.add(Event{Ev: evAbandon, Key: it.Key, Epoch: it.Epoch, Sent: sent})
			if m.stillRenew {
				r.mu.Lock()
				if !slices.Contains(r.livesOn, it) {
					r.livesOn = append(r.livesOn, it)
				}
				r.mu.Unlock()
			}
			continue
		}
		kept, at = append(kept, it), append(at, i)
	}
	if m.stillRenew {
		r.mu.Lock()
		hidden := slices.Clone(r.livesOn)
		r.mu.Unlock()
		if len(kept) > 0 {
			// With the others, as a store that kept it on their session.
			_, _ = r.inner.Renew(ctx, owner, ttl, append(hidden, kept...))
		}
	}
	out := make([]bool, len(items))
	if len(kept) == 0 {
		return out, nil
	}
	ok, err := r.renew(ctx, owner, ttl, kept, sent)
	if err != nil || len(ok) != len(kept) {
		return ok, err // a wrong answer stays wrong, for the engine to refuse
	}
	for j, i := range at {
		out[i] = ok[j]
	}
	return out, nil
}

func (r *recorder) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	sent := Now()
	if r.ctl.mode().abandon == req.Key {
		return store.AcquireResult{}, errAbandoned // not a store call: not logged
	}
	if err := r.ctl.before(ctx); err != nil {
		r.log.add(Event{Ev: evAcquire, Key: req.Key, Sent: sent, Outcome: outError, Err: err.Error()})
		return store.AcquireResult{}, err
	}
	res, err := r.inner.Acquire(ctx, req)
	e := Event{Ev: evAcquire, Key: req.Key, Sent: sent, Outcome: outHeld, Epoch: res.Epoch}
	if res.Elapsed > 0 {
		e.Dated = sent - int64(res.Elapsed)
	}
	switch held := r.ctl.after(ctx, err); {
	case err != nil:
		e.Outcome, e.Err = outError, err.Error()
	case held != nil:
		// Committed in the store, unknown to the replica: the epoch is
		// logged so that the checker knows whose it is.
		e.Outcome, e.Err = outCommit, held.Error()
		if !res.Acquired {
			e.Epoch = 0
		}
		err = held
		res = store.AcquireResult{}
	case res.Acquired:
		e.Outcome = outOK
	default:
		e.Epoch, e.Owner, e.Left = res.Holder.Epoch, res.Holder.Owner, int64(res.Holder.TimeLeft)
	}
	r.log.add(e)
	return res, err
}

func (r *recorder) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	sent := Now()
	if m := r.ctl.mode(); m.abandon != "" {
		return r.renewAbandoning(ctx, owner, ttl, items, m, sent)
	}
	r.mu.Lock()
	r.livesOn = nil // the fault is over
	r.mu.Unlock()
	return r.renew(ctx, owner, ttl, items, sent)
}

func (r *recorder) renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem, sent int64) ([]bool, error) {
	logged := make([]Item, len(items))
	for i, it := range items {
		logged[i] = Item{Key: it.Key, Epoch: it.Epoch}
	}
	if err := r.ctl.before(ctx); err != nil {
		r.log.add(Event{Ev: evRenew, Sent: sent, Outcome: outError, Err: err.Error(), Items: logged})
		return nil, err
	}
	ok, err := r.inner.Renew(ctx, owner, ttl, items)
	e := Event{Ev: evRenew, Sent: sent, Outcome: outOK, Items: logged}
	switch held := r.ctl.after(ctx, err); {
	case err != nil:
		e.Outcome, e.Err = outError, err.Error()
	case held != nil:
		e.Outcome, e.Err = outCommit, held.Error()
		err, ok = held, nil
	default:
		for i := range logged {
			logged[i].OK = i < len(ok) && ok[i]
		}
	}
	r.log.add(e)
	return ok, err
}

func (r *recorder) Release(ctx context.Context, owner string, terms []store.Term) error {
	sent := Now()
	logged := make([]Item, len(terms))
	for i, t := range terms {
		logged[i] = Item{Key: t.Key, Epoch: t.Epoch}
	}
	// Logged before the call: a release that may have committed counts as
	// one, whatever its reply.
	r.log.add(Event{Ev: evRelease, Sent: sent, Items: logged})
	err := r.ctl.before(ctx)
	if err == nil {
		err = r.inner.Release(ctx, owner, terms)
		if held := r.ctl.after(ctx, err); err == nil && held != nil {
			err = held
		}
	}
	r.log.add(callEvent(evRelDone, sent, err))
	return err
}

// List is recorded too, although no invariant rests on what it returns:
// a round's List shares the loop with the renewal, and the slow-store
// check needs every call's send time and outcome.
func (r *recorder) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	sent := Now()
	err := r.ctl.before(ctx)
	var ls []store.Lease
	if err == nil {
		ls, err = r.inner.List(ctx, prefix)
		if held := r.ctl.after(ctx, err); err == nil && held != nil {
			ls, err = nil, held
		}
	}
	r.log.add(callEvent(evList, sent, err))
	return ls, err
}

// callEvent is the record of a call whose result carries nothing else the
// checker needs: when it was sent, and whether it was answered.
func callEvent(ev string, sent int64, err error) Event {
	e := Event{Ev: ev, Sent: sent, Outcome: outOK}
	switch {
	case errors.Is(err, errHeldBack):
		e.Outcome, e.Err = outCommit, err.Error()
	case err != nil:
		e.Outcome, e.Err = outError, err.Error()
	}
	return e
}

// watchingRecorder is a recorder of a store with a push channel.
type watchingRecorder struct {
	*recorder
	w store.Watcher
}

func (r watchingRecorder) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	return r.w.Watch(ctx, prefix)
}

// control is a file the harness writes to play a fault inside a replica:
// "down" (calls hang until their deadline, nothing reaches the store),
// "hold" (calls run, their replies wait until the fault ends), "lose"
// (calls run, and fail at once as if the answer was lost), "delay
// <duration>" (that much before each call), "slow <duration>" (each call
// takes that much longer, half before and half after it: a store that
// answers slowly), "abandon <key>" (the replica's store calls leave that
// key out: see renewAbandoning), "abandon-renewing <key>" (tests only: the
// same, but the term goes on being renewed behind the engine's back), or
// empty. An empty path disables it.
type control string

type ctlMode struct {
	down, hold  bool
	lose        bool
	delay, slow time.Duration
	abandon     string // a key
	// stillRenew: "abandon-renewing", tests only: the abandoned term goes
	// on being sent to the store, though logged as left out.
	stillRenew bool
}

func (c control) mode() ctlMode {
	if c == "" {
		return ctlMode{}
	}
	b, err := os.ReadFile(string(c))
	if err != nil {
		return ctlMode{}
	}
	word, arg, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	switch word {
	case "down":
		return ctlMode{down: true}
	case "hold":
		return ctlMode{hold: true}
	case "lose":
		return ctlMode{lose: true}
	case "delay":
		d, _ := time.ParseDuration(arg)
		return ctlMode{delay: d}
	case "slow":
		d, _ := time.ParseDuration(arg)
		return ctlMode{slow: d}
	case "abandon":
		return ctlMode{abandon: arg}
	case "abandon-renewing":
		return ctlMode{abandon: arg, stillRenew: true}
	}
	return ctlMode{}
}

// before plays "down", "delay" and the first half of "slow" ahead of a call.
func (c control) before(ctx context.Context) error {
	m := c.mode()
	if d := m.delay + m.slow/2; d > 0 {
		if err := sleepCtx(ctx, d); err != nil {
			return fmt.Errorf("%w (delayed)", err)
		}
	}
	if !m.down {
		return nil
	}
	if err := c.waitWhile(ctx, func(m ctlMode) bool { return m.down }); err != nil {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	return nil
}

// after plays "hold", "lose" and the second half of "slow" once a call has
// run: the reply waits until the fault ends (hold) or its time has passed
// (slow), and is lost if the caller gives up first; with "lose" it is lost
// at once.
func (c control) after(ctx context.Context, callErr error) error {
	if callErr != nil {
		return nil
	}
	m := c.mode()
	if m.lose {
		return errReplyLost
	}
	if m.slow > 0 {
		if err := sleepCtx(ctx, m.slow-m.slow/2); err != nil {
			return fmt.Errorf("%w (slow reply): %w", errHeldBack, err)
		}
	}
	if !m.hold {
		return nil
	}
	if err := c.waitWhile(ctx, func(m ctlMode) bool { return m.hold }); err != nil {
		return fmt.Errorf("%w: %w", errHeldBack, err)
	}
	return nil
}

func (c control) waitWhile(ctx context.Context, cond func(ctlMode) bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for cond(c.mode()) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// setControl writes a control file atomically (a rename), so a replica
// never reads half a command.
func setControl(path, cmd string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cmd), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
