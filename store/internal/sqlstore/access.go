package sqlstore

import (
	"context"
	"fmt"

	"github.com/tenure-dev/tenure/store"
)

// Access decides, before each call of a server SQL store (mysql,
// postgres), whether the call may run: none once the store is closed, no
// write when it was opened read-only, and, when the store creates its
// table on first use, the table first. Set every field before the first
// call.
type Access struct {
	Backend, Table string // for errors: "postgres", "tenure_leases"
	ReadOnly       bool
	// AutoMigrate creates the table on the first call (never when
	// ReadOnly).
	AutoMigrate bool
	Closed      func() bool
	// Exists reports whether the table exists; Create makes it (it may
	// look first, as Exists does).
	Exists func(context.Context) (bool, error)
	Create func(context.Context) error

	migration Migration
}

// Read clears a call that only reads.
func (a *Access) Read(ctx context.Context) error {
	if a.Closed() {
		return store.ErrClosed
	}
	if !a.AutoMigrate || a.ReadOnly {
		return nil
	}
	return a.migration.Ensure(ctx, a.Create)
}

// Write clears a call that writes.
func (a *Access) Write(ctx context.Context) error {
	if err := a.writable(); err != nil {
		return err
	}
	return a.Read(ctx)
}

// Migrate creates the table now, even when it is known to exist.
func (a *Access) Migrate(ctx context.Context) error {
	if err := a.writable(); err != nil {
		return err
	}
	return a.migration.Run(ctx, a.Create)
}

func (a *Access) writable() error {
	switch {
	case a.Closed():
		return store.ErrClosed
	case a.ReadOnly:
		return fmt.Errorf("%s: table %s: opened read-only: %w", a.Backend, a.Table, store.ErrReadOnly)
	}
	return nil
}

// CheckTable fails with store.ErrNotFound when the table does not exist,
// for a read-only open that may not create it. hint says what else the
// URL may have meant to name ("?table= or database").
func (a *Access) CheckTable(ctx context.Context, hint string) error {
	exists, err := a.Exists(ctx)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%s: no lease table %s in this database: nothing has run against it (did you mean another %s?): %w",
			a.Backend, a.Table, hint, store.ErrNotFound)
	}
	return nil
}
