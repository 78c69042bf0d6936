package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// A standby promoted after its primary died holds what was replicated,
// which with asynchronous replication may lack the primary's last
// commits: renewals (a term expires sooner than its holder was told) and
// acquisitions (a key its holder runs looks free, and its epoch may be
// issued again). The store notices the promotion and makes up for both.
//
// The floor row (the empty key) names the server its writes went to: owner is
// the server's identity — its system identifier, which a streaming standby
// shares with its primary, and its timeline, which each promotion moves
// to a new one. A table is created with its floor row naming its server.
// Every acquisition checks that name against the server it runs on. On the
// first acquisition (or revocation) after a promotion they differ, and
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
// A floor row that names no server (a table made before this version)
// is treated the same way, once: its history is unknown.
//
// The quarantine holds back acquisitions that ask for a grace. One that
// asks for none (the records of pauses, moves and schedule periods, or a
// Config with NoGrace) says no work runs under its term, and is not held
// back. Each acquisition waits its own TTL + grace, as for the grace after
// an expiry: replicas of one key must share their timing.
const (
	// serverIdentity is the SQL naming the server a statement runs on.
	// pg_walfile_name's first eight hex digits are the current timeline.
	serverIdentity = `((SELECT system_identifier::text FROM pg_control_system()) || '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))`
	// epochJump is how far a promotion raises the epoch floor past the
	// highest epoch the new primary holds: more acquisitions of one key
	// than a replication lag could lose.
	epochJump = 1 << 20
)

// identityFunctions are the functions serverIdentity calls.
var identityFunctions = []string{"pg_control_system", "pg_walfile_name", "pg_current_wal_lsn"}

// promotionSQL is what differs between a store that can tell its server
// (named) and one on a server that cannot (some managed services refuse
// the functions serverIdentity calls; promotions then go unnoticed, as
// doc.go says).
type promotionSQL struct {
	// named is true of the floor row f when it names the server the
	// statement runs on.
	named string
	// nameServer writes the floor row of a new table.
	nameServer string
	// recordServer makes the floor row name the server, starting a
	// quarantine unless it named it already.
	recordServer string
}

func buildPromotionSQL(t string, identity bool) promotionSQL {
	if !identity {
		// Never write a name: a store that can tell its server may share
		// the table, and its quarantine must stand.
		insert := `INSERT INTO ` + t + ` (key, owner, epoch, expires_at, released, updated_at)
VALUES ('', '', 0, '-infinity', true, 'epoch') ON CONFLICT (key) DO NOTHING`
		return promotionSQL{named: `f.key IS NOT NULL`, nameServer: insert, recordServer: insert}
	}
	jump := strconv.Itoa(epochJump)
	return promotionSQL{
		named: `f.owner = ` + serverIdentity,
		nameServer: `INSERT INTO ` + t + ` (key, owner, epoch, expires_at, released, updated_at)
VALUES ('', ` + serverIdentity + `, 0, '-infinity', true, 'epoch') ON CONFLICT (key) DO NOTHING`,
		recordServer: `INSERT INTO ` + t + ` AS f (key, owner, epoch, expires_at, released, updated_at)
VALUES ('', ` + serverIdentity + `, (SELECT COALESCE(max(m.epoch), 0) FROM ` + t + ` AS m) + ` + jump + `,
	'-infinity', true, clock_timestamp())
ON CONFLICT (key) DO UPDATE SET
	owner = excluded.owner,
	epoch = GREATEST(f.epoch, (SELECT max(m.epoch) FROM ` + t + ` AS m)) + ` + jump + `,
	updated_at = clock_timestamp()
WHERE f.owner <> excluded.owner`,
	}
}

// statements returns the SQL to use: with the server's identity, unless
// the server has shown it cannot tell it.
func (s *Store) statements() *statements {
	if s.noIdentity.Load() {
		return &s.plain
	}
	return &s.sql
}

// identityUnsupported reports whether err is the server refusing one of
// the functions serverIdentity calls (missing, not supported, or not
// granted to this role), and if so falls back to the statements without
// it for good.
func (s *Store) identityUnsupported(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || s.noIdentity.Load() {
		return false
	}
	switch pgErr.Code {
	case "42883", "0A000", "42501": // undefined_function, feature_not_supported, insufficient_privilege
	default:
		return false
	}
	for _, fn := range identityFunctions {
		if strings.Contains(pgErr.Message, fn) {
			s.noIdentity.Store(true)
			return true
		}
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
