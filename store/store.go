// Package store is the contract between Tenure's engine and a lease store.
//
// A store keeps one lease record per key and decides, on its own clock, who
// holds each key. Every backend (memstore, sqlite, postgres, redis, …)
// implements [Store] and runs the conformance suite in store/storetest.
//
// # Rules every backend follows
//
//  1. A key can be acquired when it has no record, when its last term was
//     released, or when its last term expired at least grace ago (store
//     clock). The owner of a live term may acquire it again; that starts a new
//     term, so a restarted process reusing its owner id never inherits an old
//     term.
//  2. Every acquisition starts a term whose epoch is strictly greater than
//     every earlier epoch of that key. Records are kept after release and
//     expiry so that the epoch is never forgotten; a [Pruner] that deletes
//     old records first raises the store's epoch floor above every epoch it
//     deletes, and a key without a record starts above that floor.
//  3. Renew succeeds only for the (owner, epoch) that holds a live, unreleased
//     term, stamps the new expiry as store-now + ttl at the moment the
//     statement runs, and records whether the runner is running.
//  4. Release ends the term at once: a peer may acquire without waiting for
//     grace. Releasing a term that is not the current one changes nothing.
//  5. Time is the store's: expiry is never computed from a client clock.
//  6. A call that returns an error (including a cancelled or timed-out ctx)
//     has an unknown effect; callers treat it as unconfirmed.
//
// # How to implement a backend
//
//   - implement [Store]; add [Watcher] if the store can push releases;
//   - validate keys and owners with [ValidateKey] and [ValidateOwner] and any
//     table or prefix name with [ValidateName];
//   - never put a credential into an error: show URLs with [RedactURL],
//     scrub driver errors with [RedactError] and [URLSecrets], and hand the
//     driver the URL without its password ([SplitURLPassword]), so that no
//     driver reads a password by rules of its own;
//   - with a read-only option, create nothing: fail with [ErrNotFound] when
//     the store is missing and with [ErrReadOnly] on writes;
//   - add `var _ store.Store = (*Store)(nil)` and run storetest.Run in a test.
package store

import (
	"context"
	"time"
)

// Store is a lease store. Implementations are safe for concurrent use.
type Store interface {
	// Acquire starts a new term of key for owner when the key is free (see
	// the package rules). When a peer's term blocks it, Acquire returns a
	// result with Acquired false and the blocking lease, and a nil error.
	Acquire(ctx context.Context, req AcquireRequest) (AcquireResult, error)

	// Renew extends every listed term of owner to store-now + ttl in one
	// round trip. The result has one entry per item, in the same order:
	// true when renewed, false when lost (another owner, a newer epoch, a
	// released or an expired term).
	Renew(ctx context.Context, owner string, ttl time.Duration, items []RenewItem) ([]bool, error)

	// Release ends every listed term of owner now, in one round trip. Terms
	// that are no longer owner's current term are left untouched.
	Release(ctx context.Context, owner string, terms []Term) error

	// List returns every lease record whose key starts with prefix, sorted
	// by key, with liveness and time left computed on the store's clock.
	List(ctx context.Context, prefix string) ([]Lease, error)
}

// Watcher is implemented by stores that push lease events (Postgres
// LISTEN/NOTIFY, Redis pub/sub, etcd watch, in-process channels).
type Watcher interface {
	// Watch delivers events for keys with the given prefix until ctx is
	// done or the channel breaks; either way the returned channel is then
	// closed. Events may be dropped under load, and a Missed event then
	// follows the last one dropped; events are hints that make a poll
	// happen early, never the only source of truth.
	Watch(ctx context.Context, prefix string) (<-chan Event, error)
}

// Migrator is implemented by stores with a schema to create.
type Migrator interface {
	// Migrate creates the store's schema if it does not exist. Stores also
	// do this on first use; Migrate makes it explicit (tenure migrate).
	Migrate(ctx context.Context) error
}

// Revoker is implemented by stores that let an operator end a term they do
// not own (tenure release). Revoke moves the key to a new epoch owned by
// nobody and keeps the old term's expiry (never shortens it): the holder's
// next renewal is refused, so it is fenced and stops, and peers may acquire
// only once that expiry + grace has passed — so there is still at most one
// holder even if the holder never hears of the revocation. It returns false
// when the key has no live term.
type Revoker interface {
	Revoke(ctx context.Context, key string) (revoked bool, err error)
}

// Pruner is implemented by stores that can delete dead records
// (tenure prune), so a table that has seen millions of short-lived keys —
// one record per scheduled period, per moved key, per pool key retired —
// stays small.
type Pruner interface {
	// Prune deletes the records of keys starting with prefix whose last
	// term ended at least olderThan ago on the store's clock (released,
	// expired or revoked) and returns how many it deleted. Live terms are
	// never touched. Before a record goes, the store's epoch floor rises to
	// its epoch, so the key starts above every old epoch if it is ever
	// acquired again (rule 2). olderThan must exceed every grace in use: a
	// record in its grace still protects a holder that may be running.
	// Deleting is done in short batches, so renewals are never held up for
	// long; an error may leave some of the records deleted.
	Prune(ctx context.Context, prefix string, olderThan time.Duration) (int, error)
}

// AcquireRequest asks for a new term of Key for Owner.
type AcquireRequest struct {
	Key   string
	Owner string
	// TTL is how long the term lives unless renewed.
	TTL time.Duration
	// Grace is how long past a peer's expiry the key stays blocked.
	Grace time.Duration
	// Running is recorded as the runner state of the new term.
	Running bool
	// MaxElapsed lets the store date the new term up to this long before
	// the call began, when that saves it a round trip: a store that keeps
	// one session per owner (etcd) knows its session alive until the
	// moment its last keep-alive was sent + TTL, and can put the term on
	// it as it is, instead of sending another keep-alive and waiting for
	// it. Zero (the default) dates every term from the call's start. It
	// must be less than TTL.
	MaxElapsed time.Duration
}

// AcquireResult is the answer to an acquisition.
type AcquireResult struct {
	// Acquired is true when a new term was started for the requester.
	Acquired bool
	// Epoch is the new term's epoch when Acquired.
	Epoch int64
	// Holder is the blocking lease when not Acquired: a live term of a
	// peer or one that expired less than grace ago.
	Holder Lease
	// Elapsed is how long before the call began the new term is dated
	// from, at most the request's MaxElapsed: the term lives until at
	// least the call's start - Elapsed + TTL (+ grace for peers), and its
	// holder counts its deadline from there. Zero for most stores.
	Elapsed time.Duration
}

// RenewItem names one term to renew.
type RenewItem struct {
	Key   string
	Epoch int64
	// Running records whether the runner is running, so peers can report it.
	Running bool
}

// Term identifies one term of a key.
type Term struct {
	Key   string
	Epoch int64
}

// Lease is one key's record as the store sees it now.
type Lease struct {
	Key   string
	Owner string
	Epoch int64
	// Live is true while the term is owned, unreleased and unexpired
	// (a revoked term has no owner and is never live).
	Live bool
	// Released is true when the term ended by release (a peer may take
	// it at once). A revoked term is not released: it has no owner, is not
	// live, and blocks until its expiry + grace.
	Released bool
	// Running is the runner state the holder last reported.
	Running bool
	// TimeLeft is the time until expiry on the store's clock. It is
	// negative once the term has expired (minus the time since expiry),
	// which tells a peer exactly when expiry + grace comes; a release
	// stamps the expiry at the moment of release.
	TimeLeft time.Duration
}

// HeldOrInGrace reports whether l's owner still holds the key or held it
// until less than grace ago: a term that is live, or that expired without
// a release and whose grace has not run out, so no other owner can have
// it yet. Pools count such a key as its holder's (a crashed holder's keys
// are not up for grabs until grace ends).
func (l Lease) HeldOrInGrace(grace time.Duration) bool {
	return l.Owner != "" && !l.Released && (l.Live || l.TimeLeft > -grace)
}

// EventKind says what happened to a key.
type EventKind int

const (
	// Released: the term ended by release; the key may be acquired at once.
	Released EventKind = iota + 1
	// Acquired: a new term started.
	Acquired
	// Missed: the reader fell behind and events were dropped before this
	// one; anything under the prefix may have changed. It carries no key.
	// A Watcher that drops events delivers it after the last one it
	// dropped ([Offer] does both).
	Missed
)

func (k EventKind) String() string {
	switch k {
	case Released:
		return "released"
	case Acquired:
		return "acquired"
	case Missed:
		return "missed"
	default:
		return "unknown"
	}
}

// Event is a push notification from a [Watcher].
type Event struct {
	Kind  EventKind
	Key   string
	Owner string
	Epoch int64
}
