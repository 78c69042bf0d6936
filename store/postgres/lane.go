package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// renewLane is a one-connection pool kept for renewals, so that a renewal
// never needs a fresh connection.
//
// pgx closes a connection whose query outlives its context, and a fresh
// one costs a connect and, per statement, a prepare: on a network slow
// enough that those round trips outlast a call's timeout while one
// statement does not, acquisitions that time out kept replacing the
// shared pool's connections, and nearly every renewal landed on a fresh
// one and timed out too (19 of 20 through the harness's 47 ms proxy). The
// lane holds one connection (MinConns 1), which has the renewal prepared;
// a lost one is replaced in the background within half a second. A
// renewal uses the shared pool only while another renewal has the lane.
type renewLane struct {
	mu   sync.Mutex // held while a renewal uses pool
	pool *pgxpool.Pool
}

// newRenewLane makes the lane of a store on a pool configured as cfg.
func newRenewLane(cfg *pgxpool.Config) (*renewLane, error) {
	cfg = cfg.Copy()
	cfg.MaxConns, cfg.MinConns = 1, 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	return &renewLane{pool: pool}, nil
}

// take returns the lane's pool and true, or the shared pool and false
// while another renewal has the lane; after true, call put.
func (l *renewLane) take(shared *pgxpool.Pool) (*pgxpool.Pool, bool) {
	if l == nil || !l.mu.TryLock() {
		return shared, false
	}
	return l.pool, true
}

func (l *renewLane) put() { l.mu.Unlock() }

func (l *renewLane) close() {
	if l != nil {
		l.pool.Close()
	}
}
