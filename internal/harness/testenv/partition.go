package testenv

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// ErrPartitioned is what every call of a cut Partition fails with.
var ErrPartitioned = errors.New("connection reset")

// Partition is a store one replica can be cut off from, as a crashed or
// isolated process would be: while Cut is set, every call fails with
// ErrPartitioned and reaches nothing.
type Partition struct {
	store.Store
	Cut atomic.Bool
}

// Acquire implements store.Store.
func (p *Partition) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if p.Cut.Load() {
		return store.AcquireResult{}, ErrPartitioned
	}
	return p.Store.Acquire(ctx, req)
}

// Renew implements store.Store.
func (p *Partition) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if p.Cut.Load() {
		return nil, ErrPartitioned
	}
	return p.Store.Renew(ctx, owner, ttl, items)
}

// Release implements store.Store.
func (p *Partition) Release(ctx context.Context, owner string, terms []store.Term) error {
	if p.Cut.Load() {
		return ErrPartitioned
	}
	return p.Store.Release(ctx, owner, terms)
}

// List implements store.Store.
func (p *Partition) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if p.Cut.Load() {
		return nil, ErrPartitioned
	}
	return p.Store.List(ctx, prefix)
}
