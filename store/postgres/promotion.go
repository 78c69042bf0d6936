package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// A standby promoted after its primary died holds what was replicated,
// which with asynchronous replication may lack the primary's last
// commits: renewals (a term expires sooner than its holder was told) and
// acquisitions (a key its holder runs looks free, and its epoch may be
// issued again). The store notices the promotion and makes up for both.
//
// The floor row (key ”) records the server its writes went to: owner is
// the server's identity — its system identifier, which a streaming standby
// shares with its primary, and its timeline, which each promotion moves
// to a new one. Every acquisition checks that record against the server it
// runs on. On the first acquisition after a promotion they differ, and
// recordServer, once for the whole table:
//
//   - raises the epoch floor above every epoch in the table by epochJump,
//     so no epoch the old primary issued after its last replicated commit
//     is issued again (fencing keeps its promise);
//   - starts a quarantine (updated_at is its start): for TTL + grace no
//     term is granted, so every holder whose term was lost (its renewals
//     are refused, or cannot reach the store) has failed closed before a
//     peer starts the key. Terms the new primary holds go on renewing:
//     they are re-established, not lost.
//
// A table whose floor row names no server yet (made before this version,
// or by Prune) records the server without a quarantine.
const (
	// serverIdentity is the SQL naming the server a statement runs on.
	// pg_walfile_name's first eight hex digits are the current timeline.
	serverIdentity = `((SELECT system_identifier::text FROM pg_control_system()) || '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))`
	// noIdentity stands in on a server without those functions (some
	// managed services): promotions then go unnoticed, as doc.go says.
	noIdentity = `''::text`
	// epochJump is how far a promotion raises the epoch floor past the
	// highest epoch the new primary holds: more acquisitions of one key
	// than a replication lag could lose.
	epochJump = 1 << 20
)

// recordServerSQL records the server in the floor row of table t (see
// above); a no-op when the row already names it.
func recordServerSQL(t, identity string) string {
	return `INSERT INTO ` + t + ` AS f (key, owner, epoch, expires_at, released, updated_at)
VALUES ('', ` + identity + `, 0, '-infinity', true, 'epoch')
ON CONFLICT (key) DO UPDATE SET
	owner = excluded.owner,
	epoch = CASE WHEN f.owner = '' THEN f.epoch
		ELSE GREATEST(f.epoch, (SELECT max(m.epoch) FROM ` + t + ` AS m)) + ` + strconv.Itoa(epochJump) + ` END,
	updated_at = CASE WHEN f.owner = '' THEN 'epoch'::timestamptz ELSE clock_timestamp() END
WHERE f.owner <> excluded.owner`
}

// statements returns the SQL to use: with the server's identity, unless
// the server has shown it cannot tell it.
func (s *Store) statements() *statements {
	if s.noIdentity.Load() {
		return &s.plain
	}
	return &s.sql
}

// identityUnsupported reports whether err is the server refusing the
// functions serverIdentity calls, and if so falls back to noIdentity for
// good.
func (s *Store) identityUnsupported(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || s.noIdentity.Load() {
		return false
	}
	switch pgErr.Code {
	case "42883", "0A000": // undefined_function, feature_not_supported
		s.noIdentity.Store(true)
		return true
	}
	return false
}

// recordServer runs the promotion check's write (see above).
func (s *Store) recordServer(ctx context.Context, st *statements) error {
	if _, err := s.pool.Exec(ctx, st.recordServer); err != nil {
		return fmt.Errorf("record the server in the floor row: %w", err)
	}
	return nil
}
