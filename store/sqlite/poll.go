package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// poller finds the acquisitions and releases other processes commit to one
// file and table, and publishes them to the hub's watchers.
//
// Every look asks PRAGMA data_version on a connection of its own: the value
// changes only when another connection has committed, and it costs no read
// of the table, so an idle file costs one tiny query per interval. When it
// has changed, the poller reads the rows whose change_seq is above the last
// one it saw — an index range, usually empty or a few rows — and skips those
// its own hub wrote, which were published as they happened.
type poller struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// pollState is the poller goroutine's own state.
type pollState struct {
	h       *hub
	db      *sql.DB
	conn    *sql.Conn // nil after an error; reopened on the next look
	q       queries
	version int64 // data_version last seen on conn
	known   bool  // version was read on the current conn
	seq     int64 // highest change_seq seen
}

// startPoller opens the poller's connection and reads where the file
// stands, so that every change committed after Watch returns is delivered;
// then it polls every interval (re-read from the hub each time, since
// watchers come and go) until stopped.
func (s *Store) startPoller(ctx context.Context, first time.Duration) (*poller, error) {
	db, err := sql.Open("sqlite", dsn(s.path, s.busy, false))
	if err != nil {
		return nil, err
	}
	// data_version is per connection: one connection, held for good.
	db.SetMaxOpenConns(1)
	st := &pollState{h: s.hub, db: db, q: s.q}
	if err := st.connect(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := st.conn.QueryRowContext(ctx, s.q.lastChange).Scan(&st.seq); err != nil {
		st.conn.Close()
		db.Close()
		return nil, err
	}

	pctx, cancel := context.WithCancel(context.Background())
	p := &poller{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer st.close()
		t := time.NewTimer(first)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			// An error (a busy checkpoint, a vanished file) is retried at
			// the next look; change_seq says where to resume, so nothing
			// committed meanwhile is lost.
			_ = st.look(pctx)
			every := st.h.pollEvery()
			if every <= 0 { // the last watcher is leaving; stop is coming
				every = DefaultWatchPoll
			}
			t.Reset(every)
		}
	}()
	return p, nil
}

// stop ends the poller and waits until its connection is closed.
func (p *poller) stop() {
	p.cancel()
	<-p.done
}

// connect takes the poller's connection and reads its data_version. The
// version is read before anything else, so a commit that lands between it
// and the next read of the table changes it again and is looked at later.
func (st *pollState) connect(ctx context.Context) error {
	conn, err := st.db.Conn(ctx)
	if err != nil {
		return err
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&st.version); err != nil {
		conn.Close()
		return err
	}
	st.conn, st.known = conn, true
	return nil
}

func (st *pollState) close() {
	if st.conn != nil {
		st.conn.Close()
	}
	st.db.Close()
}

// look publishes the changes other processes committed since the last look.
func (st *pollState) look(ctx context.Context) error {
	if st.conn == nil {
		// A new connection has its own data_version: read the table once
		// regardless.
		if err := st.connect(ctx); err != nil {
			return err
		}
		st.known = false
	}
	var version int64
	if err := st.conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&version); err != nil {
		return st.drop(err)
	}
	if st.known && version == st.version {
		return nil
	}
	evs, seq, err := st.changes(ctx)
	if err != nil {
		return st.drop(err)
	}
	st.version, st.known, st.seq = version, true, seq
	for _, ev := range evs {
		st.h.publish(ev)
	}
	return nil
}

// changes reads the rows changed after st.seq, returning the events for
// other origins' writes and the highest change_seq read.
func (st *pollState) changes(ctx context.Context) ([]store.Event, int64, error) {
	rows, err := st.conn.QueryContext(ctx, st.q.changes, st.seq)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	seq := st.seq
	var evs []store.Event
	for rows.Next() {
		var ev store.Event
		var released, changeSeq, origin int64
		if err := rows.Scan(&ev.Key, &ev.Owner, &ev.Epoch, &released, &changeSeq, &origin); err != nil {
			return nil, 0, err
		}
		seq = max(seq, changeSeq)
		switch {
		case origin == st.h.origin:
			continue // published in-process when it was written
		case released != 0:
			ev.Kind = store.Released
		case ev.Owner != "":
			ev.Kind = store.Acquired
		default:
			// Revoked since it was acquired: there is nothing a peer
			// may act on before the term's expiry.
			continue
		}
		evs = append(evs, ev)
	}
	return evs, seq, rows.Err()
}

// drop forgets the connection after an error, so that the next look starts
// on a fresh one, and passes the error on.
func (st *pollState) drop(err error) error {
	st.conn.Close()
	st.conn = nil
	return err
}
