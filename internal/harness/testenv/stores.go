// The scaffolding the lease stores' tests share: names no other test uses,
// bounded contexts, stores closed and cleaned up when a test ends, and
// one-line store calls that fail the test on error. What every store must
// do is tested by store/storetest; this only saves the backends' own tests
// from writing the same plumbing again.

package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// CallTimeout bounds the context of [Context] and every call of the
// helpers below, so a hung server fails a test instead of stalling the run.
const CallTimeout = 30 * time.Second

// UniqueName returns prefix followed by twelve random hex digits: a table
// or namespace no other test, process or earlier run uses. It passes
// store.ValidateName when prefix is a plain identifier.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b)
}

// Context returns a context that ends after [CallTimeout] or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	t.Cleanup(cancel)
	return ctx
}

// Open calls open with a context of ten seconds and fails the test when it
// fails. When the test ends, drop (when not nil) removes the store's data
// and the store is closed. drop runs first, so it may use the store, but
// the test may have closed the store itself.
func Open[S interface{ Close() error }](t testing.TB, open func(context.Context) (S, error), drop func(context.Context, S) error) S {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := open(ctx)
	if err != nil {
		t.Fatalf("open a store: %v", err)
	}
	t.Cleanup(func() {
		if drop != nil {
			ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
			defer cancel()
			if err := drop(ctx, s); err != nil {
				t.Errorf("drop the store's data: %v", err)
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	return s
}

// ClosedAddr returns a 127.0.0.1 address where nothing listens.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	addr, err := closedAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// closedAddr is ClosedAddr's address. Nothing listens there now, but
// anything may bind it before the caller does, an outgoing connection's
// local port included.
func closedAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WithPassword parses raw, a test server's URL, and gives its user (or
// fallbackUser when it names none) password, for tests of wrong or leaked
// credentials.
func WithPassword(t testing.TB, raw, fallbackUser, password string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	user := fallbackUser
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	return u
}

// MustAcquire starts a term of key for owner, recorded as running, and
// returns its epoch; a refusal fails the test.
func MustAcquire(t testing.TB, s store.Store, key, owner string, ttl, grace time.Duration) int64 {
	t.Helper()
	res, err := s.Acquire(Context(t), store.AcquireRequest{Key: key, Owner: owner, TTL: ttl, Grace: grace, Running: true})
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", key, owner, err)
	}
	if !res.Acquired {
		t.Fatalf("Acquire(%q, %q): refused, held by %+v", key, owner, res.Holder)
	}
	return res.Epoch
}

// Renew renews items for owner and returns the answers.
func Renew(t testing.TB, s store.Store, owner string, ttl time.Duration, items ...store.RenewItem) []bool {
	t.Helper()
	ok, err := s.Renew(Context(t), owner, ttl, items)
	if err != nil {
		t.Fatalf("Renew(%q, %v): %v", owner, items, err)
	}
	if len(ok) != len(items) {
		t.Fatalf("Renew(%q, %v): %d answers for %d items", owner, items, len(ok), len(items))
	}
	return ok
}

// Release ends terms of owner.
func Release(t testing.TB, s store.Store, owner string, terms ...store.Term) {
	t.Helper()
	if err := s.Release(Context(t), owner, terms); err != nil {
		t.Fatalf("Release(%q, %v): %v", owner, terms, err)
	}
}

// List returns the leases whose keys start with prefix.
func List(t testing.TB, s store.Store, prefix string) []store.Lease {
	t.Helper()
	ls, err := s.List(Context(t), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return ls
}

// LeaseOf returns key's record; a key without one fails the test.
func LeaseOf(t testing.TB, s store.Store, key string) store.Lease {
	t.Helper()
	for _, l := range List(t, s, key) {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no record of %q", key)
	return store.Lease{}
}

// EventWait is how long [NextEvent] and [WaitClosed] wait.
const EventWait = 5 * time.Second

// NextEvent returns the next event of a watch; a closed channel or none
// within [EventWait] fails the test.
func NextEvent(t testing.TB, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the watch channel closed")
		}
		return ev
	case <-time.After(EventWait):
		t.Fatalf("no event within %v", EventWait)
	}
	return store.Event{}
}

// WaitClosed drains a watch channel until it closes; one still open after
// [EventWait] fails the test.
func WaitClosed(t testing.TB, ch <-chan store.Event) {
	t.Helper()
	timeout := time.After(EventWait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("the watch channel is still open after %v", EventWait)
		}
	}
}
