package sqlite

import (
	"context"
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
