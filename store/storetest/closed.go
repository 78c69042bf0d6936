package storetest

import (
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// closer is a store with a Close method; every backend on a server or a
// file has one, the in-memory store does not.
type closer interface {
	Close() error
}

// testClosedStoreRefusesEveryCall pins that a closed store says so with
// store.ErrClosed on every call, optional powers included, rather than
// failing in some other way or, worse, answering; and that closing twice
// is harmless.
func (c *suite) testClosedStoreRefusesEveryCall(t *testing.T) {
	s := c.fresh(t)
	cl, ok := s.(closer)
	if !ok {
		t.Skip("the store has no Close method")
	}
	e := c.mustAcquire(t, s, "k", "a")
	if err := cl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := cl.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ctx := c.ctx(t)
	_, err := s.Acquire(ctx, c.request("free", "a"))
	wantErr(t, "Acquire after Close", err, store.ErrClosed)
	_, err = s.Renew(ctx, "a", c.ttl, []store.RenewItem{{Key: "k", Epoch: e}})
	wantErr(t, "Renew after Close", err, store.ErrClosed)
	err = s.Release(ctx, "a", []store.Term{term("k", e)})
	wantErr(t, "Release after Close", err, store.ErrClosed)
	_, err = s.List(ctx, "")
	wantErr(t, "List after Close", err, store.ErrClosed)
	if r, ok := s.(store.Revoker); ok {
		_, err = r.Revoke(ctx, "k")
		wantErr(t, "Revoke after Close", err, store.ErrClosed)
	}
	if w, ok := s.(store.Watcher); ok {
		_, err = w.Watch(ctx, "")
		wantErr(t, "Watch after Close", err, store.ErrClosed)
	}
	if p, ok := s.(store.Pruner); ok {
		_, err = p.Prune(ctx, "", time.Hour)
		wantErr(t, "Prune after Close", err, store.ErrClosed)
	}
	if m, ok := s.(store.Migrator); ok {
		wantErr(t, "Migrate after Close", m.Migrate(ctx), store.ErrClosed)
	}
}
