package etcd

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// keepAlives shares a session's keep-alives among the calls that need one
// at the same time, as a database shares one flush among the commits
// waiting for it. A call needs a keep-alive sent after it began (an
// acquisition, so the session ends no earlier than its start + ttl +
// grace; a renewal, after its listing of the lease). While one keep-alive
// is in flight, the calls that arrive join the next, sent as soon as the
// first answers, so each is still sent after every call it answers began.
// A burst of acquisitions then costs a keep-alive per round trip, not one
// each: etcd's client opens a stream for every keep-alive it sends on
// demand, and the server answers each as it answers a read.
type keepAlives struct {
	mu      sync.Mutex
	sending bool             // a goroutine is sending the flights in turn
	next    *keepAliveFlight // the flight calls join; not sent yet
}

// keepAliveFlight is one keep-alive and the calls waiting for its answer.
type keepAliveFlight struct {
	// ctx belongs to no call: it ends when the keep-alive has answered,
	// or when every call waiting for it has given up, so a keep-alive
	// nobody waits for stops, and a call that gives up never ends one
	// others still wait for. Nor does one call's context (its deadline,
	// its metadata) shape the keep-alive others wait for.
	ctx     context.Context
	cancel  context.CancelFunc
	waiting int // calls waiting; guarded by keepAlives.mu

	done  chan struct{} // closed once alive and err are set
	alive bool
	err   error
}

// keepAlive refreshes sess's lease with a keep-alive sent after this call
// began, shared with the calls that overlap it. It reports false, and
// drops the session, when the lease had already ended.
//
// A call may wait for the keep-alive in flight to answer before its own is
// sent: about two round trips at worst, not one. A keep-alive that does
// not answer holds up the calls behind it until its own callers give up;
// each call still returns by its own context.
func (s *Store) keepAlive(ctx context.Context, sess *session) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	k := &sess.keepAlives
	k.mu.Lock()
	f := k.next
	if f == nil {
		fctx, cancel := context.WithCancel(context.Background())
		f = &keepAliveFlight{ctx: fctx, cancel: cancel, done: make(chan struct{})}
		k.next = f
	}
	f.waiting++
	start := !k.sending
	k.sending = true
	k.mu.Unlock()
	if start {
		go s.sendKeepAlives(sess)
	}
	select {
	case <-f.done:
		return f.alive, f.err
	case <-ctx.Done():
		k.mu.Lock()
		f.waiting--
		if f.waiting == 0 {
			if k.next == f {
				k.next = nil // never sent: the next call starts its own
			}
			f.cancel()
		}
		k.mu.Unlock()
		return false, ctx.Err()
	}
}

// sendKeepAlives sends sess's flights one after the other until no call
// waits for another.
func (s *Store) sendKeepAlives(sess *session) {
	k := &sess.keepAlives
	for {
		k.mu.Lock()
		f := k.next
		k.next = nil
		if f == nil {
			k.sending = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		sent := s.now()
		_, err := s.client.KeepAliveOnce(f.ctx, sess.lease)
		f.cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.dropSession(sess)
		case err != nil:
			f.err = err
		default:
			f.alive = true
			s.keptAlive(sess, sent)
		}
		close(f.done)
	}
}

// whileKeptAlive runs op while sess is kept alive by a keep-alive sent
// after this call began, and reports whether the session was alive. A nil
// sess keeps nothing alive (the caller made its session ready just now)
// and counts as alive. op's error comes first: a keep-alive's error then
// means what op put on the session may end before the call's start + ttl.
func (s *Store) whileKeptAlive(ctx context.Context, sess *session, op func() error) (bool, error) {
	if sess == nil {
		return true, op()
	}
	type answer struct {
		alive bool
		err   error
	}
	kept := make(chan answer, 1)
	go func() {
		alive, err := s.keepAlive(ctx, sess)
		kept <- answer{alive, err}
	}()
	err := op()
	ka := <-kept
	if err != nil {
		return false, err
	}
	return ka.alive, ka.err
}
