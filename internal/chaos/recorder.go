package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// recorder is the store a replica's supervisor uses: it logs the send
// time and outcome of every Acquire, Renew and Release, which the checker
// needs to bound when a peer may take over. With a control file it also
// plays the network faults for a store that has no network (SQLite).
type recorder struct {
	inner store.Store
	log   *eventLog
	ctl   control
}

var (
	_ store.Store   = (*recorder)(nil)
	_ store.Watcher = (*recorder)(nil)
)

var (
	errUnreachable = errors.New("chaos: store unreachable (injected)")
	errHeldBack    = errors.New("chaos: reply held back (injected)")
)

func (r *recorder) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	sent := Now()
	if err := r.ctl.before(ctx); err != nil {
		r.log.add(Event{Ev: evAcquire, Key: req.Key, Sent: sent, Outcome: outError, Err: err.Error()})
		return store.AcquireResult{}, err
	}
	res, err := r.inner.Acquire(ctx, req)
	e := Event{Ev: evAcquire, Key: req.Key, Sent: sent, Outcome: outHeld, Epoch: res.Epoch}
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
		e.Epoch, e.Owner = res.Holder.Epoch, res.Holder.Owner
	}
	r.log.add(e)
	return res, err
}

func (r *recorder) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	sent := Now()
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
	if err := r.ctl.before(ctx); err != nil {
		return err
	}
	err := r.inner.Release(ctx, owner, terms)
	if held := r.ctl.after(ctx, err); err == nil && held != nil {
		err = held
	}
	return err
}

func (r *recorder) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if err := r.ctl.before(ctx); err != nil {
		return nil, err
	}
	ls, err := r.inner.List(ctx, prefix)
	if held := r.ctl.after(ctx, err); err == nil && held != nil {
		return nil, held
	}
	return ls, err
}

func (r *recorder) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	w, ok := r.inner.(store.Watcher)
	if !ok {
		return nil, errors.New("chaos: the store cannot watch")
	}
	return w.Watch(ctx, prefix)
}

// control is a file the harness writes to play a network fault inside a
// replica: "down" (calls hang until their deadline, nothing reaches the
// store), "hold" (calls run, their replies are lost), "delay <duration>",
// or empty. An empty path disables it.
type control string

type ctlMode struct {
	down, hold bool
	delay      time.Duration
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
	case "delay":
		d, _ := time.ParseDuration(arg)
		return ctlMode{delay: d}
	}
	return ctlMode{}
}

// before plays "down" and "delay" ahead of a call.
func (c control) before(ctx context.Context) error {
	m := c.mode()
	if m.delay > 0 {
		if err := sleepCtx(ctx, m.delay); err != nil {
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

// after plays "hold" once a call has run: the reply waits until the fault
// ends or the caller gives up, and then it is lost.
func (c control) after(ctx context.Context, callErr error) error {
	if callErr != nil || !c.mode().hold {
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
