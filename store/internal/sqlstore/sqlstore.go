// Package sqlstore holds what the SQL lease stores (mysql, postgres,
// sqlite) share beyond their dialects: creating the table once on first
// use, which calls a closed or read-only store may serve (Access), the
// byte-order end of a key prefix, and the retry of an acquisition refused
// by a term that ended meanwhile.
package sqlstore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/tenure-dev/tenure/store"
)

// Migration creates a store's table on first use, once per Store. The
// zero value is ready to use.
type Migration struct {
	mu   sync.Mutex
	done atomic.Bool
}

// Ensure runs migrate unless a run has succeeded before. Concurrent first
// calls wait for one run instead of racing each other; other processes are
// the migration's own business (a lock, or DDL that is safe against
// itself).
func (m *Migration) Ensure(ctx context.Context, migrate func(context.Context) error) error {
	if m.done.Load() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done.Load() {
		return nil
	}
	return m.run(ctx, migrate)
}

// Run runs migrate now, as an explicit Migrate does even when the table is
// known to exist, and remembers a success.
func (m *Migration) Run(ctx context.Context, migrate func(context.Context) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run(ctx, migrate)
}

func (m *Migration) run(ctx context.Context, migrate func(context.Context) error) error {
	if err := migrate(ctx); err != nil {
		return err
	}
	m.done.Store(true)
	return nil
}

// PrefixEnd returns the smallest string greater than every string that
// starts with prefix, in byte order, or false when there is none (an empty
// prefix, or one of only 0xFF bytes), so that a prefix becomes the range
// key >= prefix AND key < end. The result may not be valid UTF-8.
func PrefixEnd(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xFF {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// AcquireAttempts is how often [Acquire] tries before it reports a holder.
const AcquireAttempts = 3

// Acquire calls once until it grants req or reports a holder that still
// blocks it, at most [AcquireAttempts] times. Stores that read the holder
// in a later statement than the refused write need this: in between, the
// blocking term may have ended, and reporting a free key as held would
// delay the caller to its next round. An answer that arrives after ctx
// ended is an error: it is unconfirmed.
func Acquire(ctx context.Context, req store.AcquireRequest,
	once func(context.Context, store.AcquireRequest) (store.AcquireResult, error),
) (store.AcquireResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := once(ctx, req)
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return store.AcquireResult{}, err
		}
		h := res.Holder
		free := h.Released || (!h.Live && -h.TimeLeft >= req.Grace)
		if res.Acquired || !free || attempt == AcquireAttempts {
			return res, nil
		}
	}
}
