package mysql

import (
	"fmt"
	"hash/fnv"
)

// maxIdent is the longest table name MySQL and MariaDB take.
const maxIdent = 64

// sessionTable is the quoted name of table's session table (session.go):
// table's name and ":sessions", which no validated table name has. A name
// too long for that keeps its first 46 bytes and a hash of the whole, so
// that two long names never share one.
func sessionTable(table string) string { return "`" + sessionTableName(table) + "`" }

func sessionTableName(table string) string {
	const suffix = ":sessions"
	if len(table)+len(suffix) <= maxIdent {
		return table + suffix
	}
	return fmt.Sprintf("%s~%08x%s", table[:maxIdent-len(suffix)-9], nameHash(table), suffix)
}

func nameHash(table string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(table))
	return h.Sum32()
}

// migrateLock names the lock (GET_LOCK) that serialises migrations of
// table across processes; such names are server-wide and at most 64
// characters.
func migrateLock(table string) string {
	h := fnv.New64a()
	h.Write([]byte(table))
	return fmt.Sprintf("tenure/mysql/migrate/%016x", h.Sum64())
}

// onSession is the expires_at of a record on a session, 2126-01-01 UTC in
// µs: far enough ahead that a version of this package without sessions,
// which reads only that column, sees the term live and never takes it
// over; near enough that its time left fits a time.Duration.
const onSessionUS = 4922899200000000

// Versions. Every statement that changes which terms are on a session
// moves its version (sessionbook): the next version and a new tag,
// drawn by the Store (the argument) so that it knows it without reading
// the row back. The tag it had, which the Book chains changes by, is one
// the statement's WHERE clause requires (known to the Book, or read just
// before); a statement that requires none tells the Book nothing. No
// assignment of any statement here reads a column the same statement
// assigns, so neither the order of assignments (left to right in MySQL,
// at once under MariaDB's SIMULTANEOUS_ASSIGNMENT, unspecified in a
// multi-table UPDATE) nor which table a multi-table UPDATE writes first
// changes what it writes.

// sessionQueries are the statements of sessions (session.go).
type sessionQueries struct {
	createSessions, addColumn, probeColumn, probeSessions string

	newSession, renewSession, changeSession, joinSession, joined string
	renewTerms, learnSession, takeOffAt, takeOffAnyway           string

	takeOverSession, sessionOf, revoke, revokeSession string
	termsOf, releaseSession                           string
	shareSessions                                     string
	pruneSessionCandidates, pruneSessions             string
}

// ids is the derived table of a sorted JSON array of session ids, joined
// to the sessions by primary key in that order.
const ids = `JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
	STRAIGHT_JOIN {s} AS x FORCE INDEX (PRIMARY) ON x.id = j.id`

// alone is the condition a renewal that writes the session row alone
// adds: no record on it has another owner. A version of this package
// from before sessions revokes a term by emptying its owner and leaves it
// on its session; the renewal after that must go term by term, which
// finds the term lost and takes it off (renewTerms), rather than keep it
// on as long as the session lives. That empty owner is the only other one
// a record on a session can have (a term goes on only while its owner's,
// and every other write of this version takes it off), so the probe is an
// equality on both parts of the (session, owner) index: it reads no entry
// of the session's records and, finding none, takes a gap lock alone,
// which waits for no other lock (an insert into that gap — a term joining
// the session before it — waits for it, one statement long).
// A range (owner <> mine) would lock, shared, the first entry past it:
// another owner's record on the next session, which that owner's release
// or a takeover may hold for as long as its transaction lasts. Args: id.
const alone = `NOT EXISTS (SELECT 1 FROM {t} AS o WHERE o.session = ? AND o.owner = '')`

// ours says whether listed record l is owner's and unreleased.
const ours = `(l.owner = me.owner AND NOT l.released)`

// renewable says whether renewTerms renews listed record l: owner's,
// unreleased, and live on its own expiry or on me as it stands. A term on
// another session of the owner (another Store's, of the same owner and
// TTL) is not renewed here: that session's expiry may move on while this
// statement waits for a record after stamping me's, and the move would
// cut what its renewal promised. It is answered lost; the other Store
// keeps it.
const renewable = `(l.owner = me.owner AND NOT l.released
	AND IF(l.session = 0, l.expires_at, IF(l.session = me.id, me.expires_at, 0)) > {now})`

// renewJoin is changeSession, or joinSession with bump, its change of
// version.
func renewJoin(r replacer, bump string) string {
	return r.Replace(`UPDATE {s} AS me
	LEFT JOIN (JSON_TABLE(?, '$[*]' COLUMNS (
		k VARCHAR(1024) CHARACTER SET ascii PATH '$[0]',
		e BIGINT PATH '$[1]',
		r TINYINT PATH '$[2]',
		n TINYINT PATH '$[3]'
	)) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k) AND l.epoch = j.e)
	ON l.owner = me.owner AND NOT l.released AND IF(j.n, l.session = 0 AND l.expires_at > {now}, l.session = me.id)
SET me.expires_at = {now} + ?, ` + bump + `
	l.running = j.r, l.renew_id = ?, l.expires_at = IF(j.n, {far}, l.expires_at), l.session = IF(j.n, me.id, l.session)
WHERE me.id = ? AND me.owner = UNHEX(?) AND me.version = ? AND me.tag = ? AND me.expires_at > {now} AND ` + alone)
}

// takeOff is takeOffAt or takeOffAnyway, with the condition on me's
// version.
func takeOff(r replacer, at string) string {
	return r.Replace(`UPDATE {s} AS me
	STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (
		k VARCHAR(1024) CHARACTER SET ascii PATH '$[0]',
		e BIGINT PATH '$[1]'
	)) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k) AND l.epoch = j.e
SET l.session = 0, l.expires_at = me.expires_at, me.version = me.version + 1, me.tag = ?
WHERE me.id = ? AND l.session = me.id ` + at)
}

func buildSessionQueries(r replacer) sessionQueries {
	return sessionQueries{
		// AUTO_INCREMENT, which InnoDB keeps across restarts (MySQL 8,
		// MariaDB 10.2.4 on): an id is never used twice, so a Store that
		// remembers a session deleted since can never renew another
		// process's.
		createSessions: r.Replace(`CREATE TABLE IF NOT EXISTS {s} (
	id         BIGINT         NOT NULL AUTO_INCREMENT,
	owner      VARBINARY(512) NOT NULL,
	expires_at BIGINT         NOT NULL,
	version    BIGINT         NOT NULL DEFAULT 0,
	tag        BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (id)
) ENGINE=InnoDB`),
		addColumn:     r.Replace("ALTER TABLE {t} ADD COLUMN session BIGINT NOT NULL DEFAULT 0, ADD KEY session (session, owner)"),
		probeColumn:   r.Replace(`SELECT session FROM {t} LIMIT 0`),
		probeSessions: r.Replace(`SELECT 1 FROM {s} LIMIT 0`),

		// Args: owner, ttl µs, tag.
		newSession: r.Replace(`INSERT INTO {s} (owner, expires_at, version, tag) VALUES (UNHEX(?), {now} + ?, 0, ?)`),

		// The steady renewal of a Store that knows every term on its
		// session at this version and tag: the session row alone. InnoDB
		// locks the row before it evaluates WHERE, so the clock is read
		// after any wait. Args: ttl µs, id, owner, version, tag, id.
		renewSession: r.Replace(`UPDATE {s} SET expires_at = {now} + ?
WHERE id = ? AND owner = UNHEX(?) AND version = ? AND tag = ? AND expires_at > {now} AND ` + alone),
		// renewSession, and in the same statement the runner states that
		// changed (n = 0) of terms on the session, and the terms acquired
		// since (n = 1), which go on it if they are still owner's, on
		// their own record, unreleased and live (joinSession also moves
		// the session to the next version, for them). The session is
		// locked first (a constant row, read before the join), then the
		// records in the batch's key order, each judged on the clock read
		// once it is locked; the session's new expiry is computed at the
		// first record, after its wait. Every record written gets the
		// renewal's id; the session row counts one. The version is set,
		// not incremented: the WHERE clause fixes the one it had. Args: a
		// sorted JSON array of ["hex key", epoch, running, n]; ttl µs,
		// [version, tag,] renew id; id, owner, version, tag, id.
		changeSession: renewJoin(r, ""),
		joinSession:   renewJoin(r, "me.version = ?, me.tag = ?,"),
		// The terms changeSession or joinSession wrote on session ?, when
		// its row count says not all were. Args: items, renew id, session.
		joined: r.Replace(`SELECT l.lease_key, l.epoch FROM {items} WHERE l.renew_id = ? AND l.session = ?`),

		// Rule 3 term by term onto session me, in one statement (see
		// session.go): me is locked first, then the listed records in key
		// order; each row is judged on the clock read once its locks are
		// held. Listed terms that are
		// renewable go on me; listed ones on me that are no longer the
		// owner's unreleased terms at their epoch (an older version's
		// release by the same owner id) come off with a TTL from now,
		// more than the expiry me had; the terms on me it does not list
		// come off after it (takeOff). A read of the records on me here
		// would lock gaps of the session index, which a statement moving
		// other terms onto their session while it holds records this one
		// waits for must insert into. me moves to a new version. No
		// assignment reads a column the statement assigns: a
		// row on me is renewable exactly when it is owner's and
		// unreleased, as me is live. The WHERE clause reads
		// me.expires_at, which the statement also sets, for a term on me:
		// once me is found live its old value and its new one both pass
		// the test. Args: items; renew id, ttl µs, ttl µs, tag; id, owner.
		renewTerms: r.Replace(`UPDATE {s} AS me
	STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (
		k VARCHAR(1024) CHARACTER SET ascii PATH '$[0]',
		e BIGINT PATH '$[1]',
		r TINYINT PATH '$[2]'
	)) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k) AND l.epoch = j.e
SET l.running = IF(` + ours + `, j.r, l.running),
	l.renew_id = IF(` + ours + `, ?, l.renew_id),
	l.expires_at = IF(` + ours + `, {far}, {now} + ?),
	l.session = IF(` + ours + `, me.id, 0),
	me.expires_at = {now} + ?, me.version = me.version + 1, me.tag = ?
WHERE me.id = ? AND me.owner = UNHEX(?) AND me.expires_at > {now}
	AND (` + renewable + ` OR l.session = me.id)`),
		// The terms on me a term-by-term renewal did not renew (as
		// learnSession read them) come off, with me's expiry as it stands
		// under its lock: every renewal that listed one of them, this
		// renewal's or another's since (of the same owner, at once),
		// promised it no more than that, as a session's expiry only moves
		// on. me moves to a new version: from the one read, for the
		// Book to follow (takeOffAt), or from whatever it is when that
		// failed (takeOffAnyway), so that a change made meanwhile does not
		// leave the terms on me for as long as it is renewed. me is locked
		// first, then the records in key order. Args: a sorted JSON array
		// of ["hex key", epoch]; tag; id[, version, tag].
		takeOffAt:     takeOff(r, `AND me.version = ? AND me.tag = ?`),
		takeOffAnyway: takeOff(r, ``),
		// Session ? whole, when live and owner's: its version and tag, and
		// each term on it, with whether it is owner's and unreleased. A
		// plain read: one snapshot. Args: id, owner.
		learnSession: r.Replace(`SELECT x.version, x.tag, l.lease_key, l.epoch, l.running, l.owner = x.owner AND NOT l.released
FROM {s} AS x LEFT JOIN {t} AS l ON l.session = x.id
WHERE x.id = ? AND x.owner = UNHEX(?) AND x.expires_at > {start}`),

		// The statements below change a single session, which they name
		// (from a plain read before): one auto-committed statement each,
		// which locks the session row first (a constant row of a
		// STRAIGHT_JOIN, read before the join), then the records, and
		// keeps them only while it runs, so that a client that stalls
		// holds up no renewal. A record that is no longer on the session
		// matches nothing (the caller reads again). No assignment reads a
		// column the statement assigns (see Versions above).
		//
		// Rules 1–2 for a record on session ?: the term leaves the
		// session, which moves to a new version that no caller reports to
		// its Book (the next renewal of a Book that knew the term on it
		// finds the session moved and goes term by term). Its OK packet
		// carries the new epoch. Args: key, owner, ttl µs, running, tag,
		// session, owner, grace µs.
		takeOverSession: r.Replace(`UPDATE {s} AS x
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(?) AND l.session = x.id
SET l.owner = UNHEX(?),
	l.epoch = LAST_INSERT_ID(l.epoch + 1),
	l.expires_at = {now} + ?,
	l.released = FALSE,
	l.running = ?,
	l.updated_at = {now},
	l.session = 0,
	x.version = x.version + 1, x.tag = ?
WHERE x.id = ? AND (l.released OR l.owner = UNHEX(?) OR x.expires_at + ? <= {now})`),
		// Args: key.
		sessionOf: r.Replace(`SELECT session FROM {t} WHERE lease_key = UNHEX(?)`),
		// A live term on its own record moves to a new epoch owned by
		// nobody, and keeps its expiry: a holder that never hears of the
		// revocation may run until then, so peers wait for expiry + grace
		// as after a crash. Args: key.
		revoke: r.Replace(`UPDATE {t} SET
	owner = '',
	epoch = LAST_INSERT_ID(epoch + 1),
	released = FALSE,
	running = FALSE,
	updated_at = {now}
WHERE lease_key = UNHEX(?) AND session = 0 AND NOT released AND owner <> '' AND expires_at > {now}`),
		// revoke for a term on session ?: it leaves the session with the
		// session's expiry, read under the session's lock; the session
		// moves to a new version no caller reports (as takeOverSession).
		// Args: key, tag, session.
		revokeSession: r.Replace(`UPDATE {s} AS x
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(?) AND l.session = x.id
SET l.owner = '',
	l.epoch = LAST_INSERT_ID(l.epoch + 1),
	l.released = FALSE,
	l.running = FALSE,
	l.updated_at = {now},
	l.expires_at = x.expires_at,
	l.session = 0,
	x.version = x.version + 1, x.tag = ?
WHERE x.id = ? AND NOT l.released AND l.owner <> '' AND x.expires_at > {now}`),

		// The terms a release ends, in key order, with the session each
		// is on and its version: a plain read. Args: items, owner.
		termsOf: r.Replace(`SELECT l.lease_key, l.epoch, l.session, COALESCE(x.version, 0), COALESCE(x.tag, 0)
FROM {items} {withSession}
WHERE l.owner = UNHEX(?) AND NOT l.released`),
		// Rule 4 (see release) for the listed terms on session ?, at the
		// version read (or any, when the first argument is true), which
		// moves to the next: the caller knows it exactly (the version it
		// read, and the tag it drew) and tells its Book. Args: a sorted
		// JSON array of ["hex key", epoch]; tag; session, any, version,
		// tag, owner.
		releaseSession: r.Replace(`UPDATE {s} AS x
	STRAIGHT_JOIN JSON_TABLE(?, '$[*]' COLUMNS (
		k VARCHAR(1024) CHARACTER SET ascii PATH '$[0]',
		e BIGINT PATH '$[1]'
	)) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k) AND l.epoch = j.e
SET l.released = TRUE, l.running = FALSE, l.expires_at = {now}, l.updated_at = {now}, l.session = 0,
	x.version = x.version + 1, x.tag = ?
WHERE x.id = ? AND (? OR (x.version = ? AND x.tag = ?)) AND l.session = x.id AND l.owner = UNHEX(?) AND NOT l.released`),
		// Args: ids.
		shareSessions: r.Replace(`SELECT x.id, x.expires_at FROM {ids} LOCK IN SHARE MODE`),

		// Sessions dead for ? µs that no record is on: a plain read, then
		// a delete of those still so. Args: age µs; ids, age µs.
		pruneSessionCandidates: r.Replace(`SELECT x.id FROM {s} AS x
WHERE x.expires_at + ? <= {start} AND NOT EXISTS (SELECT 1 FROM {t} AS l WHERE l.session = x.id)
ORDER BY x.id`),
		pruneSessions: r.Replace(`DELETE x FROM {ids}
WHERE x.expires_at + ? <= {now} AND NOT EXISTS (SELECT 1 FROM {t} AS l WHERE l.session = x.id)`),
	}
}
