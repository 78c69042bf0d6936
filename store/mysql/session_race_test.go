package mysql

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// Races between sessions' transactions, made deterministic: a lock held
// from another transaction and a wait until the statements under test
// wait for locks (the shared ones, sessiontest.RunRaces), or a statement
// held on the wire (this package's own).

func TestSessionRaces(t *testing.T) {
	sessiontest.RunRaces(t, sessions, sessiontest.Locks{
		HoldRecord: func(t *testing.T, s sessiontest.Store, key string) func() {
			return holdRow(t, s.(*Store), "SELECT 1 FROM `"+s.(*Store).table+"` WHERE lease_key = ? FOR UPDATE", []byte(key))
		},
		HoldSession: func(t *testing.T, s sessiontest.Store, id int64) func() {
			return holdRow(t, s.(*Store), "SELECT 1 FROM "+sessionTable(s.(*Store).table)+" WHERE id = ? FOR UPDATE", id)
		},
		WaitForLockWaiters: func(t *testing.T, s sessiontest.Store, n int) { waitForLockWaiters(t, s.(*Store), n) },
	})
}

// holdRow locks one row from another transaction until the returned func.
func holdRow(t *testing.T, s *Store, query string, arg any) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := tx.QueryRowContext(ctx, query, arg).Scan(&one); err != nil {
		_ = tx.Rollback()
		t.Fatalf("%s: %v", query, err)
	}
	return func() { _ = tx.Rollback() }
}

// waitForLockWaiters returns once n transactions wait for a lock in a
// statement on s's tables (the session table's name holds the table's).
// INNODB_TRX is MySQL's and MariaDB's; InnoDB refreshes what it shows only
// when it has not been read for 100 ms.
func waitForLockWaiters(t *testing.T, s *Store, n int) {
	t.Helper()
	waitFor(t, s, n, 150*time.Millisecond, "transactions wait for a row lock", `SELECT COUNT(*) FROM information_schema.INNODB_TRX
WHERE trx_state = 'LOCK WAIT' AND INSTR(trx_query, ?) > 0`, s.table)
}

// waitForMetadataLock returns once a statement on s's table that holds
// what waits for a metadata lock.
func waitForMetadataLock(t *testing.T, s *Store, what string) {
	t.Helper()
	waitFor(t, s, 1, 5*time.Millisecond, what+" waits for a metadata lock", `SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE STATE = 'Waiting for table metadata lock' AND INSTR(INFO, ?) > 0 AND INSTR(INFO, ?) > 0`, what, s.table)
}

// waitFor returns once query, a count read every pause, reaches n, or
// fails the test after 10s.
func waitFor(t *testing.T, s *Store, n int, pause time.Duration, what, query string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		if err := s.db.QueryRow(query, args...).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d after 10s: %s", got, n, what)
		}
		time.Sleep(pause)
	}
}

// Two renewals of one owner at once, one that leaves k2 out and one that
// lists it, the second renewing k2 after the first renewed the session
// and before it took k2 off: k2 must come off no earlier than the expiry
// the second promised it, or a peer takes it while its holder runs on.
// The first is held on the wire, where no lock wait can hold it (a plain
// read waits for none): before its read of the session, so that the
// second goes term by term; or before its take-off, so that the second
// writes the session alone (under MariaDB's SIMULTANEOUS_ASSIGNMENT,
// which changes what a statement that reads a column it also assigns
// writes).
func TestATermTakenOffASessionKeepsTheExpiryAnotherRenewalPromisedIt(t *testing.T) {
	t.Run("held before its read", func(t *testing.T) {
		checkTakeOffKeepsThePromise(t, "", []byte(buildQueries("t").learnSession[:40]))
	})
	t.Run("held before its take-off, simultaneous assignment", func(t *testing.T) {
		var version string
		if err := tables.New(t).db.QueryRow(`SELECT VERSION()`).Scan(&version); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(version, "MariaDB") {
			t.Skip("SIMULTANEOUS_ASSIGNMENT is MariaDB's")
		}
		checkTakeOffKeepsThePromise(t, "sql_mode='STRICT_TRANS_TABLES,SIMULTANEOUS_ASSIGNMENT'", takeOffSQL)
	})
}

// takeOffSQL is in the statements that take terms a renewal left out off
// its session.
var takeOffSQL = []byte("SET l.session = 0, l.expires_at = me.")

// checkTakeOffKeepsThePromise runs the renewals of the test above on a
// Store with params, the first held before its packet that holds at.
func checkTakeOffKeepsThePromise(t *testing.T, params string, at []byte) {
	table := tables.New(t).table
	var armed atomic.Bool
	held, gate := make(chan struct{}), make(chan struct{})
	s := wiredStore(t, table, params, func(packet []byte) {
		if bytes.Contains(packet, at) && armed.CompareAndSwap(true, false) {
			close(held)
			<-gate
		}
	})
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k1, k2 := sessiontest.Acquire(t, s, "k1", "o", ttl), sessiontest.Acquire(t, s, "k2", "o", ttl)
	sessions.Renew(t, s, "o", ttl, k1, k2)
	id := sessions.SessionOf(t, s, "k2")

	armed.Store(true)
	first := make(chan []bool, 1)
	go func() { // leaves k2 out: term by term
		got, err := s.Renew(ctx, "o", ttl, []store.RenewItem{{Key: "k1", Epoch: k1.Epoch}})
		if err != nil {
			t.Error(err)
		}
		first <- got
	}()
	<-held
	if got, err := s.Renew(ctx, "o", ttl, []store.RenewItem{{Key: "k1", Epoch: k1.Epoch}, {Key: "k2", Epoch: k2.Epoch}}); err != nil || !got[0] || !got[1] {
		t.Fatalf("the renewal that lists k2: %v, %v; want both renewed", got, err)
	}
	var promised int64 // the session's expiry, which that renewal gave k2
	if err := s.db.QueryRowContext(ctx, "SELECT expires_at FROM "+sessionTable(table)+" WHERE id = ?", id).Scan(&promised); err != nil {
		t.Fatal(err)
	}
	close(gate)
	got := <-first
	var on, expires int64 // k2's expiry: its own, or its session's
	err := s.db.QueryRowContext(ctx, "SELECT l.session, IF(l.session = 0, l.expires_at, x.expires_at) FROM `"+table+"` AS l LEFT JOIN "+
		sessionTable(table)+" AS x ON x.id = l.session WHERE l.lease_key = ?", []byte("k2")).Scan(&on, &expires)
	if err != nil {
		t.Fatal(err)
	}
	if expires < promised {
		t.Errorf("k2 (on session %d) expires %v before the expiry the renewal that listed it promised", on, time.Duration(promised-expires)*time.Microsecond)
	}
	if len(got) != 1 || !got[0] {
		t.Errorf("the renewal that leaves k2 out: %v; want k1 renewed", got)
	}
}

// A renewal that leaves k2 out takes it off the session even when the
// session changed between its read of the session and the take-off (here
// another handle revokes k3): left on, k2 would live as long as the
// session with nobody listing it.
func TestATermARenewalLeftOutComesOffThoughTheSessionChangedMeanwhile(t *testing.T) {
	table := tables.New(t).table
	var armed atomic.Bool
	held, gate := make(chan struct{}), make(chan struct{})
	s := wiredStore(t, table, "", func(packet []byte) {
		if bytes.Contains(packet, takeOffSQL) && armed.CompareAndSwap(true, false) {
			close(held)
			<-gate
		}
	})
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k1, k2, k3 := sessiontest.Acquire(t, s, "k1", "o", ttl), sessiontest.Acquire(t, s, "k2", "o", ttl), sessiontest.Acquire(t, s, "k3", "o", ttl)
	sessions.Renew(t, s, "o", ttl, k1, k2, k3)

	armed.Store(true)
	done := make(chan error, 1)
	go func() { // lists k1 and k3, not k2: held before it takes k2 off
		_, err := s.Renew(ctx, "o", ttl, []store.RenewItem{{Key: "k1", Epoch: k1.Epoch}, {Key: "k3", Epoch: k3.Epoch}})
		done <- err
	}()
	<-held
	if ok, err := tables.OpenTable(t, table, false).Revoke(ctx, "k3"); err != nil || !ok {
		t.Fatalf("another handle's Revoke of k3: %t %v", ok, err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if on := sessions.SessionOf(t, s, "k2"); on != 0 {
		t.Fatalf("k2, which the renewal left out, is still on session %d", on)
	}
	if l := sessiontest.LeaseOf(t, s, "k2"); !l.Live || l.TimeLeft > ttl {
		t.Fatalf("k2 off the session: %+v; want live for a TTL at most", l)
	}
}

// held waits for a statement held on the wire, and fails the test (rather
// than hang it) when none comes.
func held(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was never sent", what)
	}
}

// The steady renewal's probe for a record of an empty owner (alone) is an
// equality on the (session, owner) index: a gap lock, which waits for no
// other transaction's lock. A range (owner <> mine) read, under a shared
// next-key lock, the first entry past the session's: another owner's
// record on the next session, which that owner's open transaction may
// hold (here one that moves it off its session and releases it, as an
// operator's or an older version's might) for as long as it lasts.
func TestAnotherOwnersOpenTransactionHoldsUpNoSteadyRenewal(t *testing.T) {
	a := tables.New(t)
	const ttl = time.Minute
	ka := sessiontest.Acquire(t, a, "ka", "a", ttl)
	sessions.Renew(t, a, "a", ttl, ka)
	sessions.Renew(t, a, "a", ttl, ka) // steady from now on
	b := tables.OpenTable(t, a.table, false)
	kb := sessiontest.Acquire(t, b, "kb", "b", ttl)
	sessions.Renew(t, b, "b", ttl, kb)
	if sa, sb := sessions.SessionOf(t, a, "ka"), sessions.SessionOf(t, a, "kb"); sa == 0 || sb <= sa {
		t.Fatalf("sessions: a's %d, b's %d; want b's after a's", sa, sb)
	}
	ctx := testenv.Context(t)
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "UPDATE `"+a.table+"` SET session = 0, released = TRUE WHERE lease_key = ?", []byte("kb")); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	before := slowRenewals.Load()
	start := time.Now()
	got, err := a.Renew(rctx, "a", ttl, []store.RenewItem{{Key: "ka", Epoch: ka.Epoch, Running: true}})
	took := time.Since(start)
	if err != nil || !got[0] || took > time.Second {
		t.Fatalf("a's steady renewal while b's transaction holds b's record: %v %v after %v; want renewed at once", got, err, took.Round(time.Millisecond))
	}
	if slowRenewals.Load() != before {
		t.Error("a's renewal went term by term; want the session row alone")
	}
}

// A revocation is a plain read and one auto-committed UPDATE, never a
// transaction kept across round trips: held on the wire right before its
// UPDATE (a CLI that stalls, on a slow network), it holds up no renewal of
// the holder; once sent, it revokes, and the holder's next renewal finds
// the term lost.
func TestARevocationInFlightHoldsUpNoRenewalOfTheHolder(t *testing.T) {
	s := tables.New(t)
	const ttl = time.Minute
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k1, k2)
	sessions.Renew(t, s, "a", ttl, k1, k2)

	var armed atomic.Bool
	sent, gate := make(chan struct{}), make(chan struct{})
	cli := wiredStore(t, s.table, "", func(packet []byte) {
		if bytes.Contains(packet, []byte("SET l.owner = ''")) && armed.CompareAndSwap(true, false) {
			close(sent)
			<-gate
		}
	})
	armed.Store(true)
	type answer struct {
		ok  bool
		err error
	}
	revoked := make(chan answer, 1)
	go func() { ok, err := cli.Revoke(context.Background(), "k2"); revoked <- answer{ok, err} }()
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	held(t, sent, "the revocation's UPDATE")

	ctx, cancel := context.WithTimeout(testenv.Context(t), 2*time.Second)
	defer cancel()
	items := []store.RenewItem{{Key: "k1", Epoch: k1.Epoch, Running: true}, {Key: "k2", Epoch: k2.Epoch, Running: true}}
	start := time.Now()
	got, err := s.Renew(ctx, "a", ttl, items)
	took := time.Since(start)
	if err != nil || !got[0] || !got[1] || took > time.Second {
		t.Fatalf("the holder's renewal while a revocation of k2 is in flight: %v %v after %v; want both renewed at once", got, err, took.Round(time.Millisecond))
	}
	opened = true
	close(gate)
	if r := <-revoked; r.err != nil || !r.ok {
		t.Fatalf("the revocation: %t %v", r.ok, r.err)
	}
	if got, err := s.Renew(testenv.Context(t), "a", ttl, items); err != nil || !got[0] || got[1] {
		t.Fatalf("the renewal after the revocation: %v %v; want [true false]", got, err)
	}
	if l := sessiontest.LeaseOf(t, s, "k2"); l.Owner != "" || l.Epoch != k2.Epoch+1 || l.TimeLeft <= 0 {
		t.Fatalf("k2 after the revocation: %+v", l)
	}
}

// A renewal that leaves k2 out takes it off the session before it renews
// the session, when the Store knows it is on: a take-off that fails (here
// its packet is refused on the wire; on a slow network, the round trip
// that does not fit) fails the renewal before it extends anything, so the
// term its holder gave up on ends within a TTL however often the holder
// calls Renew. (After the renewal, a take-off that fails is left to the
// next renewal.)
func TestATermLeftOutEndsThoughItsTakeOffKeepsFailing(t *testing.T) {
	table := tables.New(t).table
	var refuse atomic.Bool
	s := wiredStoreFailing(t, table, func(packet []byte) bool {
		return refuse.Load() && bytes.Contains(packet, takeOffSQL)
	})
	const ttl = 400 * time.Millisecond
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k1, k2)
	refuse.Store(true)
	start := time.Now()
	failed := 0
	for time.Since(start) < 4*ttl {
		ctx, cancel := context.WithTimeout(testenv.Context(t), ttl/2)
		if _, err := s.Renew(ctx, "a", ttl, []store.RenewItem{{Key: "k1", Epoch: k1.Epoch, Running: true}}); err != nil {
			failed++
		}
		cancel()
		time.Sleep(ttl / 4)
	}
	if l := sessiontest.LeaseOf(t, s, "k2"); l.Live {
		t.Errorf("k2 still live %v after the last renewal that listed it (TTL %v; %d renewals failed at the take-off): %+v",
			time.Since(start).Round(time.Millisecond), ttl, failed, l)
	}
	if failed == 0 {
		t.Error("no renewal failed: the take-off was never refused")
	}
}

// The statements that change one session (a revocation, a release, a
// takeover of a record on it) each write the session and a record in one
// multi-table UPDATE, whose order of assignments is unspecified (and
// simultaneous under MariaDB's SIMULTANEOUS_ASSIGNMENT): none reads a
// column the statement assigns, so they write the same under it.
func TestStatementsThatChangeASessionWriteTheSameUnderSimultaneousAssignment(t *testing.T) {
	base := tables.New(t)
	var version string
	if err := base.db.QueryRow(`SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Skip("SIMULTANEOUS_ASSIGNMENT is MariaDB's")
	}
	s := wiredStore(t, base.table, "sql_mode='STRICT_TRANS_TABLES,SIMULTANEOUS_ASSIGNMENT'", func([]byte) {})
	ctx := testenv.Context(t)
	const ttl = time.Minute
	k1, k2, k3 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl), sessiontest.Acquire(t, s, "k3", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k1, k2, k3)
	id := sessions.SessionOf(t, s, "k1")
	sessionExpiry := func() (expires, v int64) {
		t.Helper()
		if err := s.db.QueryRowContext(ctx, "SELECT expires_at, version FROM "+sessionTable(base.table)+" WHERE id = ?", id).Scan(&expires, &v); err != nil {
			t.Fatal(err)
		}
		return expires, v
	}
	expires, v0 := sessionExpiry()

	if ok, err := s.Revoke(ctx, "k1"); err != nil || !ok {
		t.Fatalf("Revoke: %t %v", ok, err)
	}
	var owner []byte
	var epoch, on, own int64
	if err := s.db.QueryRowContext(ctx, "SELECT owner, epoch, session, expires_at FROM `"+base.table+"` WHERE lease_key = ?", []byte("k1")).Scan(&owner, &epoch, &on, &own); err != nil {
		t.Fatal(err)
	}
	if len(owner) != 0 || epoch != k1.Epoch+1 || on != 0 || own != expires {
		t.Fatalf("k1 revoked: owner %q, epoch %d, session %d, expiry %d; want '', %d, 0, the session's %d", owner, epoch, on, own, k1.Epoch+1, expires)
	}
	if err := s.Release(ctx, "a", []store.Term{k2}); err != nil {
		t.Fatal(err)
	}
	if l := sessiontest.LeaseOf(t, s, "k2"); !l.Released || l.Live || sessions.SessionOf(t, s, "k2") != 0 {
		t.Fatalf("k2 released: %+v", l)
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Key: "k3", Owner: "a", TTL: ttl, Grace: time.Second})
	if err != nil || !res.Acquired || res.Epoch != k3.Epoch+1 {
		t.Fatalf("a's own takeover of k3 on its session: %+v %v; want epoch %d", res, err, k3.Epoch+1)
	}
	if l := sessiontest.LeaseOf(t, s, "k3"); !l.Live || l.Epoch != k3.Epoch+1 || l.TimeLeft > ttl || sessions.SessionOf(t, s, "k3") != 0 {
		t.Fatalf("k3 taken over: %+v", l)
	}
	if _, v := sessionExpiry(); v != v0+3 {
		t.Fatalf("the session at version %d after three changes from %d", v, v0)
	}
}
