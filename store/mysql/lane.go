package mysql

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// renewLane is a connection kept for renewals alone, so that a renewal
// never waits for a connection behind acquisitions and reads of the table.
//
// On a network slow enough that opening a connection (greeting,
// authentication, session variables: 3–4 round trips) outlasts one call's
// timeout while a statement does not, a renewal that needs a new
// connection always times out, and the driver then closes the connection
// it was using; meanwhile the other calls keep the one warm connection
// busy. A replica lost its keys that way in every slow-store window. With
// a lane, a renewal runs on its own warm connection; a lane closed by a
// timed-out renewal is opened again in the background, with a timeout of
// its own, ready for the next one.
type renewLane struct {
	mu      sync.Mutex // held while a renewal uses conn
	conn    *sql.Conn  // nil while none is open
	opening bool
	closed  bool

	ctx    context.Context // ends at close, cutting an opening short
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// laneOpenTimeout bounds the opening of the lane's connection.
const laneOpenTimeout = 10 * time.Second

func newRenewLane() *renewLane {
	ctx, cancel := context.WithCancel(context.Background())
	return &renewLane{ctx: ctx, cancel: cancel}
}

// take returns the lane's connection for one renewal, or nil when it is
// in use by another renewal or not open (yet): the caller then uses the
// pool, and the lane opens in the background. A non-nil connection must
// be handed back with put.
func (l *renewLane) take(db *sql.DB) *sql.Conn {
	if !l.mu.TryLock() {
		return nil
	}
	if l.conn == nil {
		l.openLocked(db)
		l.mu.Unlock()
		return nil
	}
	return l.conn
}

// put hands back the connection take returned. After a failed renewal it
// is closed — the driver may have dropped it mid-statement — and a new one
// opened.
func (l *renewLane) put(db *sql.DB, conn *sql.Conn, err error) {
	if conn == nil {
		return
	}
	if err != nil {
		_ = conn.Close()
		l.conn = nil
		l.openLocked(db)
	}
	l.mu.Unlock()
}

// openLocked starts opening the connection unless that is under way or the
// lane is closed. l.mu is held.
func (l *renewLane) openLocked(db *sql.DB) {
	if l.opening || l.closed {
		return
	}
	l.opening = true
	l.wg.Go(func() {
		ctx, cancel := context.WithTimeout(l.ctx, laneOpenTimeout)
		conn, err := db.Conn(ctx)
		if err == nil {
			err = conn.PingContext(ctx)
		}
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		l.opening = false
		switch {
		case err != nil:
			if conn != nil {
				_ = conn.Close()
			}
		case l.closed:
			_ = conn.Close()
		default:
			l.conn = conn
		}
	})
}

// close gives the connection back and waits for an opening to end.
func (l *renewLane) close() {
	l.cancel()
	l.mu.Lock()
	l.closed = true
	if l.conn != nil {
		_ = l.conn.Close()
		l.conn = nil
	}
	l.mu.Unlock()
	l.wg.Wait()
}
