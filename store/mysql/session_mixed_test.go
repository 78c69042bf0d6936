package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessiontest"
)

// countingStore opens a Store on table whose connections count what they
// send. With interpolateParams every statement is one packet, written at
// once, and one round trip.
func countingStore(t *testing.T, table string) (*Store, *atomic.Int64) {
	t.Helper()
	sent := new(atomic.Int64)
	return wiredStore(t, table, "", func([]byte) { sent.Add(1) }), sent
}

// wiredStore opens a Store on table, with params added to the test
// server's URL, whose connections call sending with each packet before
// they write it (and wait for it to return).
func wiredStore(t *testing.T, table, params string, sending func([]byte)) *Store {
	t.Helper()
	url := testenv.MySQL.URL(t)
	switch {
	case params == "":
	case strings.Contains(url, "?"):
		url += "&" + params
	default:
		url += "?" + params
	}
	return storeOverWire(t, url, table, func(c net.Conn) net.Conn { return wiredConn{c, sending} })
}

// storeOverWire opens a Store on table at url whose connections are
// wrapped by wrap.
func storeOverWire(t *testing.T, url, table string, wrap func(net.Conn) net.Conn) *Store {
	t.Helper()
	cfg, _, _, _, err := parseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	}
	connector, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	s, err := New(db, Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type wiredConn struct {
	net.Conn
	sending func([]byte)
}

func (c wiredConn) Write(b []byte) (int, error) {
	c.sending(b)
	return c.Conn.Write(b)
}

// A renewal takes at most three round trips whatever path it takes, so
// that it completes on a network whose round trip is a third of a call's
// timeout (internal/harness/chaos's slow network): the one that puts
// terms acquired since on the session, and the one that goes term by term
// after a change the Store did not make. A Store that could not would
// lose every key at its deadline and never recover.
func TestARenewalTakesAtMostThreeRoundTrips(t *testing.T) {
	owner := tables.New(t)
	s, sent := countingStore(t, owner.table)
	const ttl = time.Minute
	k0 := sessiontest.Acquire(t, s, "k0", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k0)
	waitForLane(t, s)
	k1, k2 := sessiontest.Acquire(t, s, "k1", "a", ttl), sessiontest.Acquire(t, s, "k2", "a", ttl)

	renew := func(what string, want []bool, wantSlow bool, most int64) {
		t.Helper()
		before := sent.Load()
		got, slow := sessions.Renew(t, s, "a", ttl, k0, k1, k2)
		n := sent.Load() - before
		t.Logf("%s: %d round trips", what, n)
		if n > most {
			t.Errorf("%s: %d round trips; want at most %d", what, n, most)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || slow != wantSlow {
			t.Errorf("%s: %v, slow %t; want %v, slow %t", what, got, slow, want, wantSlow)
		}
	}
	renew("the renewal that puts k1 and k2 on the session", []bool{true, true, true}, false, 3)
	renew("the steady renewal", []bool{true, true, true}, false, 1)
	if ok, err := tables.OpenTable(t, owner.table, false).Revoke(testenv.Context(t), "k1"); err != nil || !ok {
		t.Fatalf("another Store's Revoke: %t %v", ok, err)
	}
	renew("the renewal after another Store revoked k1", []bool{true, false, true}, true, 3)
	renew("the renewal after that", []bool{true, false, true}, true, 3)
}

// waitForLane waits for s's renewal lane: renewals run on a connection of
// their own once it has opened (in the background), whose opening a test
// that counts round trips must not count.
func waitForLane(t *testing.T, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.lane.mu.Lock()
		open := s.lane.conn != nil
		s.lane.mu.Unlock()
		if open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewal lane did not open in 10s")
		}
	}
}

// A version of this package from before sessions, on a migrated table,
// reads the epoch of its takeovers from the OK packet: no trigger on the
// table may keep the server from sending it there.
func TestATakeoverByAVersionWithoutSessionsOnAMigratedTableGetsItsEpoch(t *testing.T) {
	old, epoch := tableFromBeforeSessions(t, time.Microsecond) // expires at once
	ctx := testenv.Context(t)
	_, takeOver, _, _, _ := legacy(old.table)
	if err := tables.OpenTable(t, old.table, false).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := old.db.ExecContext(ctx, takeOver, hexString("b"), time.Minute.Microseconds(), true, hexString("k"), hexString("b"), int64(0))
	n, err := affected(r, err)
	var got int64
	if err == nil {
		got, err = r.LastInsertId()
	}
	if err != nil || n != 1 || got != epoch+1 {
		t.Fatalf("the old takeover of k: %d rows, epoch %d, %v; want 1 row, epoch %d", n, got, err, epoch+1)
	}
	if l := sessiontest.LeaseOf(t, old, "k"); !l.Live || l.Owner != "b" || l.Epoch != epoch+1 {
		t.Fatalf("k after the old takeover: %+v", l)
	}
}

// The steady renewal's test for a record of another owner on the session
// (alone) probes the (session, owner) index: it must not read the
// session's records, which may be a hundred thousand.
func TestTheSteadyRenewalProbesTheSessionIndex(t *testing.T) {
	s := tables.New(t)
	const n = 200
	items := make([]store.RenewItem, n)
	for i := range items {
		k := sessiontest.Acquire(t, s, fmt.Sprintf("k%03d", i), "a", time.Minute)
		items[i] = store.RenewItem{Key: k.Key, Epoch: k.Epoch}
	}
	if _, err := s.Renew(testenv.Context(t), "a", time.Minute, items); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("ANALYZE TABLE `" + s.table + "`"); err != nil {
		t.Fatal(err)
	}
	id := sessions.SessionOf(t, s, "k000")
	rows, err := s.db.Query("EXPLAIN "+s.q.renewSession, 1, id, hexString("a"), 1, 1, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	probed := false
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		plan := map[string]string{}
		for i, c := range cols {
			plan[c] = vals[i].String
		}
		if plan["table"] != "o" {
			continue
		}
		probed = true
		var estimate int
		fmt.Sscan(plan["rows"], &estimate)
		// Both key parts (8 bytes of session, and owner): an equality
		// probe (ref) or a range, not every entry of the session.
		if plan["key"] != "session" || (plan["type"] != "ref" && plan["type"] != "range") || plan["key_len"] == "8" || estimate >= n {
			t.Errorf("the probe of the session's records: %v; want a probe of both parts of key session, far fewer rows than %d", plan, n)
		}
	}
	if err := rows.Err(); err != nil || !probed {
		t.Fatalf("no plan for the probe of the session's records (%v)", err)
	}
}

// Drop leaves nothing named after the table; a read-only Store may not.
func TestDropLeavesNothingNamedAfterTheTable(t *testing.T) {
	s := tables.New(t)
	ctx := testenv.Context(t)
	k := sessiontest.Acquire(t, s, "k", "a", time.Minute)
	sessions.Renew(t, s, "a", time.Minute, k) // the session table is in use
	ro, err := Open(ctx, testenv.MySQL.URL(t), Options{Table: s.table, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Drop(ctx); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("Drop by a read-only Store: %v; want store.ErrReadOnly", err)
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND LEFT(TABLE_NAME, CHAR_LENGTH(?)) = ?`, s.table, s.table).Scan(&left)
	if err != nil || left != 0 {
		t.Fatalf("tables named after %s after Drop: %d, %v", s.table, left, err)
	}
}

// Terms a renewal leaves out come off the session, every one, with the
// session's expiry as that renewal left it (never less: another renewal
// of the owner may have listed them meanwhile), so they end within a TTL
// of it; and the renewal after it writes the session alone.
func TestTermsARenewalLeavesOutComeOffTheSession(t *testing.T) {
	s := tables.New(t)
	const ttl = 2 * time.Second
	var terms []store.Term
	for _, k := range []string{"k0", "k1", "k2", "k3"} {
		terms = append(terms, sessiontest.Acquire(t, s, k, "a", ttl))
	}
	sessions.Renew(t, s, "a", ttl, terms...)
	if got, slow := sessions.Renew(t, s, "a", ttl, terms[0]); !got[0] || !slow {
		t.Fatalf("renewal of k0 alone: %v, slow %t; want renewed, term by term", got, slow)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		l := sessiontest.LeaseOf(t, s, k)
		if on := sessions.SessionOf(t, s, k); !l.Live || l.TimeLeft > ttl || on != 0 {
			t.Errorf("%s after the renewal that left it out: %+v on session %d; want live for a TTL at most, off the session", k, l, on)
		}
	}
	if l := sessiontest.LeaseOf(t, s, "k0"); l.TimeLeft < ttl-200*time.Millisecond {
		t.Errorf("k0 after its renewal: %+v", l)
	}
	if got, slow := sessions.Renew(t, s, "a", ttl, terms[0]); !got[0] || slow {
		t.Fatalf("the renewal after: %v, slow %t; want renewed on the session alone", got, slow)
	}
}

// A peer's acquisition of a key whose holder died with the term on its
// session (every held key is on one after its first renewal: the common
// failover) takes three round trips: the takeover that finds the record on
// a session, the read of the holder, and the takeover of a record on a
// session, one statement that locks the session first. Before sessions it
// was one; a renewal is held to three, and so is a failover.
func TestAFailoverTakeoverOfAKeyOnASessionTakesAtMostThreeRoundTrips(t *testing.T) {
	holder := tables.New(t)
	const ttl = 300 * time.Millisecond
	k := sessiontest.Acquire(t, holder, "k", "a", ttl)
	if got, _ := sessions.Renew(t, holder, "a", ttl, k); !got[0] {
		t.Fatal("k not renewed")
	}
	if on := sessions.SessionOf(t, holder, "k"); on == 0 {
		t.Fatal("k not on a session")
	}
	peer, sent := countingStore(t, holder.table)
	ctx := testenv.Context(t)
	// Warm the peer: its session for this TTL opened, its pool connected.
	sessiontest.Acquire(t, peer, "warm", "p", ttl)
	sessiontest.Acquire(t, peer, "warm2", "p", ttl)
	time.Sleep(ttl + ttl/4 + 100*time.Millisecond) // a's session is over, + grace
	before := sent.Load()
	res, err := peer.Acquire(ctx, store.AcquireRequest{Key: "k", Owner: "p", TTL: ttl, Grace: ttl / 4})
	n := sent.Load() - before
	if err != nil || !res.Acquired || res.Epoch != k.Epoch+1 {
		t.Fatalf("the failover acquisition: %+v %v; want acquired at epoch %d", res, err, k.Epoch+1)
	}
	t.Logf("the failover acquisition of a key on a dead session: %d round trips", n)
	if n > 3 {
		t.Errorf("the failover acquisition took %d round trips; want at most 3", n)
	}
	if l := sessiontest.LeaseOf(t, peer, "k"); !l.Live || l.Owner != "p" || sessions.SessionOf(t, peer, "k") != 0 {
		t.Fatalf("k after the takeover: %+v; want p's, on its own record", l)
	}
	if got, _ := sessions.Renew(t, holder, "a", ttl, k); got[0] {
		t.Fatal("a's term on k renewed after p took it")
	}
}

// Release of a term on a session (every held term after its first
// renewal, so every graceful handover) is a plain read and one statement
// that locks the session first; before sessions it was one statement. A
// Release that takes more round trips than fit a call's timeout on a slow
// network leaves the handover to the TTL + grace.
func TestAReleaseOfATermOnASessionTakesAtMostTwoRoundTrips(t *testing.T) {
	s, sent := countingStore(t, tables.New(t).table)
	const ttl = time.Minute
	k, kept := sessiontest.Acquire(t, s, "k", "a", ttl), sessiontest.Acquire(t, s, "kept", "a", ttl)
	sessions.Renew(t, s, "a", ttl, k, kept)
	waitForLane(t, s)
	before := sent.Load()
	if err := s.Release(testenv.Context(t), "a", []store.Term{k}); err != nil {
		t.Fatal(err)
	}
	n := sent.Load() - before
	t.Logf("a release of one term on a session: %d round trips", n)
	if n > 2 {
		t.Errorf("a release took %d round trips; want at most 2", n)
	}
	if l := sessiontest.LeaseOf(t, s, "k"); l.Live || !l.Released {
		t.Fatalf("k after its release: %+v", l)
	}
	// The Store heard of the version its release moved the session to.
	if got, slow := sessions.Renew(t, s, "a", ttl, kept); !got[0] || slow {
		t.Fatalf("the renewal of kept after the release: %v, slow %t; want renewed on the session alone", got, slow)
	}
}

// wiredStoreFailing is wiredStore whose connections fail the write of a
// packet refuse picks (the driver then drops the connection).
func wiredStoreFailing(t *testing.T, table string, refuse func([]byte) bool) *Store {
	t.Helper()
	return storeOverWire(t, testenv.MySQL.URL(t), table, func(c net.Conn) net.Conn { return refusingConn{c, refuse} })
}

type refusingConn struct {
	net.Conn
	refuse func([]byte) bool
}

func (c refusingConn) Write(b []byte) (int, error) {
	if c.refuse(b) {
		return 0, errRefused
	}
	return c.Conn.Write(b)
}

var errRefused = errors.New("refused by the test")
