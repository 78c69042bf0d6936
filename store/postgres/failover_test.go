package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

const (
	failoverTTL   = 2 * time.Second
	failoverGrace = 500 * time.Millisecond
)

// openPair opens a store on the pair through its multi-host URL.
func openPair(t *testing.T, pair *testenv.PostgresPair) *Store {
	t.Helper()
	s, err := Open(testenv.Context(t), pair.URL(), Options{Table: testenv.UniqueName("failover_")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acquireEventually retries Acquire while the pool reconnects to the new
// primary, and returns the first answer.
func acquireEventually(t *testing.T, s *Store, key, owner string) store.AcquireResult {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: owner, TTL: failoverTTL, Grace: failoverGrace})
		cancel()
		if err == nil {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q) after the failover: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// renewEventually is Renew, retried while the pool reconnects.
func renewEventually(t *testing.T, s *Store, owner string, items ...store.RenewItem) []bool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		got, err := s.Renew(ctx, owner, failoverTTL, items)
		cancel()
		if err == nil {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("Renew after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An asynchronous standby promoted after the primary crashed lacks the
// primary's last commits. Here the standby's WAL receiver is held, so the
// acquisition of "lost" is acknowledged to a but never replicated. Without
// the promotion check, b took "lost" at once, with the very epoch a had been
// given: two holders, one fencing token. With it, the store notices the new
// timeline, keeps every key out of reach for TTL + grace (a fails closed
// meanwhile: its renewal is refused) and then grants an epoch above any the
// old primary issued. a's term on "kept", which was replicated, renews on.
func TestAPromotedStandbyGrantsNoLostTermAgain(t *testing.T) {
	pair := testenv.StartPostgresPair(t, testenv.Async)
	s := openPair(t, pair)
	// Nothing renews "kept" until the promoted standby answers, which on a
	// loaded machine takes longer than failoverTTL (a CI run saw it expire
	// first): its term is long enough to outlive the failover.
	kept := testenv.MustAcquire(t, s, "kept", "a", time.Minute, failoverGrace)
	testenv.MustAcquire(t, s, "warm", "a", failoverTTL, failoverGrace) // the floor row names the primary
	// The table, made by the first acquisition, must be on the standby:
	// only what follows is to be lost.
	if err := pair.CaughtUp(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}

	if err := pair.HoldReplication(); err != nil {
		t.Fatal(err)
	}
	lost := testenv.MustAcquire(t, s, "lost", "a", failoverTTL, failoverGrace)
	if err := pair.Failover(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()

	res := acquireEventually(t, s, "lost", "b")
	if res.Acquired {
		t.Fatalf("b was granted %q (epoch %d) at once after the promotion; a was granted epoch %d on the old primary and may still run it", "lost", res.Epoch, lost)
	}
	if h := res.Holder; !h.Live || h.Owner != "" || h.TimeLeft <= 0 || h.TimeLeft > failoverTTL {
		t.Errorf("refused during the quarantine with holder %+v; want a live term of nobody's ending within the TTL", h)
	}
	if res := acquireEventually(t, s, "new-key", "b"); res.Acquired {
		t.Errorf("a key never seen was granted during the quarantine")
	}
	got := renewEventually(t, s, "a", store.RenewItem{Key: "kept", Epoch: kept}, store.RenewItem{Key: "lost", Epoch: lost})
	if !got[0] || got[1] {
		t.Errorf("renewals after the promotion (kept, lost) = %v; want [true false]: the replicated term goes on, the lost one fails", got)
	}

	for {
		res = acquireEventually(t, s, "lost", "b")
		if res.Acquired {
			break
		}
		if h := res.Holder; h.TimeLeft <= -failoverGrace || h.TimeLeft > failoverTTL {
			t.Fatalf("refused with holder %+v: it does not say when the quarantine ends", h)
		}
		// a renews as its keeper would, every few tens of milliseconds here.
		if got := renewEventually(t, s, "a", store.RenewItem{Key: "kept", Epoch: kept}); !got[0] {
			t.Fatalf("a's replicated term on %q was not renewed during the quarantine", "kept")
		}
		if time.Since(promoted) > time.Minute {
			t.Fatalf("b never got %q: %+v", "lost", res.Holder)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waited := time.Since(promoted); waited < failoverTTL+failoverGrace {
		t.Errorf("b got %q %v after the promotion, before TTL + grace = %v", "lost", waited, failoverTTL+failoverGrace)
	}
	if res.Epoch <= lost+epochJump-2 {
		t.Errorf("b's epoch %d is not above the floor a promotion raises (a's lost epoch %d + %d)", res.Epoch, lost, epochJump)
	}
}

// A new table's floor row names its server from the start: its first
// acquisition waits for nothing, and starts at epoch 1.
func TestANewTableNamesItsServer(t *testing.T) {
	s := tables.New(t)
	if got := testenv.MustAcquire(t, s, "k", "a", failoverTTL, failoverGrace); got != 1 {
		t.Errorf("first epoch %d, want 1", got)
	}
	var owner string
	if err := s.pool.QueryRow(testenv.Context(t), `SELECT owner FROM `+s.ident+` WHERE key = ''`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if owner == "" {
		t.Errorf("the floor row names no server")
	}
}

// A floor row that names no server (a table made before the promotion
// check, whose history is unknown) is treated as a promotion once: a
// quarantine, and epochs above the floor; a record (no grace) is not held
// back.
func TestAFloorRowNamingNoServerStartsOneQuarantine(t *testing.T) {
	s := tables.New(t)
	held := testenv.MustAcquire(t, s, "held", "a", failoverTTL, failoverGrace)
	ctx := testenv.Context(t)
	if _, err := s.pool.Exec(ctx, `UPDATE `+s.ident+` SET owner = '' WHERE key = ''`); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "b", TTL: failoverTTL, Grace: failoverGrace})
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired || !res.Holder.Live || res.Holder.Owner != "" {
		t.Fatalf("acquired %v, holder %+v; want a refusal by the quarantine", res.Acquired, res.Holder)
	}
	if got := testenv.Renew(t, s, "a", failoverTTL, store.RenewItem{Key: "held", Epoch: held}); !got[0] {
		t.Errorf("a live term was not renewed during the quarantine")
	}
	rec, err := s.Acquire(ctx, store.AcquireRequest{Key: "k~paused", Owner: "tenure-pause", TTL: time.Hour})
	if err != nil || !rec.Acquired || rec.Epoch <= epochJump {
		t.Errorf("a record without grace: %+v, %v; want it granted above the raised floor", rec, err)
	}
	if ok, err := s.Revoke(ctx, "held"); err != nil || !ok {
		t.Fatalf("Revoke: %v, %v", ok, err)
	}
	if got := testenv.LeaseOf(t, s, "held"); got.Epoch <= epochJump {
		t.Errorf("revocation's epoch %d is not above the raised floor", got.Epoch)
	}
}

// A store on a role that may not call the identity functions never names
// the server, so it cannot end a quarantine a store that can has started;
// it keeps to it.
func TestAStoreThatCannotTellItsServerKeepsToTheQuarantine(t *testing.T) {
	a := tables.New(t)
	ctx := testenv.Context(t)
	testenv.MustAcquire(t, a, "warm", "a", failoverTTL, failoverGrace)
	b, err := Open(ctx, testenv.Postgres.URL(t), Options{Table: a.table})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.noIdentity.Store(true)
	if _, err := a.pool.Exec(ctx, `UPDATE `+a.ident+` SET owner = 'another/00000002' WHERE key = ''`); err != nil {
		t.Fatal(err)
	}
	acquire := func(s *Store, key string) store.AcquireResult {
		res, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "x", TTL: failoverTTL, Grace: failoverGrace})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := acquire(a, "k1"); res.Acquired {
		t.Fatal("granted right after a promotion")
	}
	if res := acquire(b, "k2"); res.Acquired {
		t.Error("the store that cannot tell its server was granted a key during the quarantine")
	}
	if res := acquire(a, "k3"); res.Acquired {
		t.Error("the quarantine ended once the other store had acquired")
	}
}
