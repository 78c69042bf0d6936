package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// gates holds one write gate per database file in this process.
var (
	gatesMu sync.Mutex
	gates   = map[string]gate{}
)

// gate queues this process's writers to one file before they ask SQLite
// for its write lock. SQLite's busy handler polls with sleeps of up to
// 100ms, so fifty writers contending inside SQLite take seconds to get
// through; queued here, each starts the moment the previous one ends.
// Writers in other processes still meet at SQLite's lock and its busy
// timeout. A gate is never removed, like a hub.
type gate chan struct{}

func gateFor(path string) gate {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	g, ok := gates[path]
	if !ok {
		g = make(gate, 1)
		gates[path] = g
	}
	return g
}

// enter waits for the gate or for ctx to end; on success the caller must
// call leave.
func (g gate) enter(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gate) leave() { <-g }

// beginWrite enters this process's gate for the file and begins a write
// transaction: the DSN's _txlock=immediate makes it BEGIN IMMEDIATE, so
// SQLite's write lock is held from the start and everything the
// transaction reads and writes is one state. done rolls the transaction
// back (a no-op after Commit) and leaves the gate.
func (s *Store) beginWrite(ctx context.Context) (tx *sql.Tx, done func(), err error) {
	if err := s.gate.enter(ctx); err != nil {
		return nil, nil, err
	}
	tx, err = s.db.BeginTx(ctx, nil)
	if err != nil {
		s.gate.leave()
		return nil, nil, err
	}
	return tx, func() {
		_ = tx.Rollback()
		s.gate.leave()
	}, nil
}
