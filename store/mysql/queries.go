package mysql

import (
	"strconv"
	"strings"
)

// nowUS is the server's clock, in microseconds since the Unix epoch, read
// when the expression is evaluated. NOW(6) and UTC_TIMESTAMP(6) are frozen
// at the start of the statement, before any wait for a row lock; SYSDATE(6)
// is not. SYSDATE is in the session's time zone, so rather than convert it
// (ambiguous for an hour a year where clocks fall back) the expression adds
// the time since the statement began to its UTC start time. Only a
// statement that runs across a daylight-saving jump in a session whose
// time_zone has one could be off; Open's sessions use '+00:00'.
const nowUS = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))` +
	` + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)))`

// startUS is the server's clock at the start of the statement: one
// reading for every row, for statements that never wait for row locks
// (plain SELECTs read a snapshot).
const startUS = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

// items is the derived table of a batch: a JSON array of
// ["hex key", epoch, running] sent as one parameter. Keys travel as hex so
// that neither the connection's character set nor JSON escaping can change
// a byte. STRAIGHT_JOIN and FORCE INDEX make the server walk the batch in
// its (key) order and find each row by primary key, so a batch locks only
// its own rows, in key order, and two batches never deadlock; without them
// a small table is scanned, and in REPEATABLE READ every row scanned is
// locked.
const items = `JSON_TABLE(?, '$[*]' COLUMNS (
		k VARCHAR(1024) CHARACTER SET ascii PATH '$[0]',
		e BIGINT PATH '$[1]',
		r TINYINT PATH '$[2]'
	)) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k) AND l.epoch = j.e`

// queries holds the SQL of one table, built once by buildQueries. Keys and
// owners are passed as hex and stored as VARBINARY: byte for byte, with no
// collation (a PAD SPACE collation would make "job" equal "job ").
type queries struct {
	probe, create             string
	takeOver, insert, holder  string
	release                   string
	list, listAll             string
	listLegacy, listAllLegacy string
	sessionQueries            // session_queries.go

	// For Prune (prune.go).
	floorRow, lockFloor, pruneBatch, pruneBatchAll, lockDead, deleteKeys, raiseFloor string
}

// expiry is the expiry of record l, whose session (if any) is joined as x
// (withSession): the session's while the record is on one (session.go).
// A session that is gone counts as long expired: one is deleted only once
// dead with no record on it.
const (
	withSession = `LEFT JOIN {s} AS x ON x.id = l.session AND l.session <> 0`
	expiry      = `IF(l.session = 0, l.expires_at, COALESCE(x.expires_at, 0))`
)

// keys is the derived table of a JSON array of hex keys, sorted, joined to
// their records by primary key in that order (see items).
const keys = `JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET ascii PATH '$')) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k)`

func buildQueries(table string) queries {
	// The name has been validated as a plain identifier; the backticks
	// let it be a reserved word.
	t := "`" + table + "`"
	// A Replacer does not rescan what it put in, so the templates are
	// filled in first.
	tmpl := strings.NewReplacer("{items}", items, "{keys}", keys, "{ids}", ids, "{exp}", expiry, "{withSession}", withSession)
	names := strings.NewReplacer("{t}", t, "{s}", sessionTable(table),
		"{now}", nowUS, "{start}", startUS, "{far}", strconv.Itoa(onSessionUS))
	r := replacer(func(q string) string { return names.Replace(tmpl.Replace(q)) })
	return queries{
		sessionQueries: buildSessionQueries(r),

		probe: r.Replace(`SELECT 1 FROM {t} LIMIT 0`),

		// renew_id is the random id of the last Renew call that extended the
		// term; see renewed. session is the session the term is on, 0 for
		// none (session.go).
		create: r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	lease_key  VARBINARY(512) NOT NULL,
	owner      VARBINARY(512) NOT NULL,
	epoch      BIGINT         NOT NULL,
	expires_at BIGINT         NOT NULL,
	released   BOOLEAN        NOT NULL DEFAULT FALSE,
	running    BOOLEAN        NOT NULL DEFAULT FALSE,
	updated_at BIGINT         NOT NULL,
	renew_id   BIGINT         NOT NULL DEFAULT 0,
	session    BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (lease_key),
	KEY session (session, owner)
) ENGINE=InnoDB`),

		// Rules 1–2 for a key whose record is on no session (a record on
		// one is taken over by takeOverSession, which locks the session
		// first). The WHERE clause is read once, on the row as locked
		// (after any wait), before the SET clause writes anything;
		// LAST_INSERT_ID(expr) hands the new epoch back in the OK packet,
		// so the statement needs no second read. Args: owner, ttl µs,
		// running, key, owner, grace µs.
		takeOver: r.Replace(`UPDATE {t} SET
	owner = UNHEX(?),
	epoch = LAST_INSERT_ID(epoch + 1),
	expires_at = {now} + ?,
	released = FALSE,
	running = ?,
	updated_at = {now}
WHERE lease_key = UNHEX(?) AND session = 0
	AND (released OR owner = UNHEX(?) OR expires_at + ? <= {now})`),

		// A key without a record starts above the epoch floor: the highest
		// epoch Prune deleted, kept in the row whose key is empty (no lease
		// key is). The floor is read with a shared lock, which waits for a
		// prune's exclusive one and then reads the committed row, whatever
		// the isolation level; LAST_INSERT_ID(expr) hands the epoch back.
		// IGNORE turns a duplicate (a peer inserted first) into "0 rows"
		// instead of an error; the values are validated, so nothing else
		// can be ignored. Args: key, owner, ttl µs, running.
		insert: r.Replace(`INSERT IGNORE INTO {t}
	(lease_key, owner, epoch, expires_at, released, running, updated_at)
SELECT UNHEX(?), UNHEX(?), LAST_INSERT_ID(COALESCE(MAX(f.epoch), 0) + 1), {now} + ?, FALSE, ?, {now}
FROM {t} AS f WHERE f.lease_key = '' LOCK IN SHARE MODE`),

		// The key's holder, and the session its record is on.
		holder: r.Replace(`SELECT l.owner, l.epoch, l.released, l.running, {exp} - {start}, l.session
FROM {t} AS l {withSession} WHERE l.lease_key = UNHEX(?)`),

		// Rule 4 for the listed terms on their own records: owner and
		// epoch stay, so the record remembers the epoch; expiry is stamped
		// now. One on a session is released with it (releaseSession).
		// Args: items, owner.
		release: r.Replace(`UPDATE {items}
SET l.released = TRUE, l.running = FALSE, l.expires_at = {now}, l.updated_at = {now}
WHERE l.owner = UNHEX(?) AND NOT l.released AND l.session = 0`),

		// A byte range on the primary key: exact, and it stops at the end of
		// the prefix. The bounds are hex, so any byte may be in them.
		list: r.Replace(`SELECT l.lease_key, l.owner, l.epoch, l.released, l.running, {exp} - {start}
FROM {t} AS l {withSession} WHERE l.lease_key >= UNHEX(?) AND l.lease_key < UNHEX(?)
ORDER BY l.lease_key`),
		// For a prefix that no string is past (empty, or all 0xFF bytes).
		listAll: r.Replace(`SELECT l.lease_key, l.owner, l.epoch, l.released, l.running, {exp} - {start}
FROM {t} AS l {withSession} WHERE l.lease_key >= UNHEX(?) AND l.lease_key <> ''
ORDER BY l.lease_key`),
		// list and listAll of a table made before sessions (a read-only
		// Store's).
		listLegacy: r.Replace(`SELECT lease_key, owner, epoch, released, running, expires_at - {start}
FROM {t} WHERE lease_key >= UNHEX(?) AND lease_key < UNHEX(?)
ORDER BY lease_key`),
		listAllLegacy: r.Replace(`SELECT lease_key, owner, epoch, released, running, expires_at - {start}
FROM {t} WHERE lease_key >= UNHEX(?) AND lease_key <> ''
ORDER BY lease_key`),

		// The floor row exists before an insert or a prune locks it, so
		// that the locks are on a record, not a gap (see ensureFloor).
		floorRow: r.Replace(`INSERT IGNORE INTO {t}
	(lease_key, owner, epoch, expires_at, released, running, updated_at)
VALUES ('', '', 0, 0, TRUE, FALSE, 0)`),
		lockFloor: r.Replace(`SELECT epoch FROM {t} WHERE lease_key = '' FOR UPDATE`),
		// The candidates of a batch, with the session each is on: records
		// under a prefix whose term ended at least ? µs ago, past the last
		// key of the batch before (first '', so never the floor row). A
		// plain read, which locks nothing: in REPEATABLE READ a locking
		// scan would lock every live row it passes until the batch
		// commits. Args: low bound, [high bound,] after, age µs, batch
		// size.
		pruneBatch: r.Replace(`SELECT l.lease_key, l.session FROM {t} AS l {withSession}
WHERE l.lease_key >= UNHEX(?) AND l.lease_key < UNHEX(?) AND l.lease_key > UNHEX(?) AND {exp} + ? <= {start}
ORDER BY l.lease_key LIMIT ?`),
		pruneBatchAll: r.Replace(`SELECT l.lease_key, l.session FROM {t} AS l {withSession}
WHERE l.lease_key >= UNHEX(?) AND l.lease_key > UNHEX(?) AND {exp} + ? <= {start}
ORDER BY l.lease_key LIMIT ?`),
		// The candidates locked by primary key, latest version, with the
		// clock read once each is held; prune.go decides which are still
		// dead. Args: a JSON array of hex keys.
		lockDead: r.Replace(`SELECT l.lease_key, l.epoch, l.session, l.expires_at, {now} FROM {keys} FOR UPDATE`),
		// Args: a JSON array of hex keys.
		deleteKeys: r.Replace(`DELETE l FROM {keys}`),
		raiseFloor: r.Replace(`UPDATE {t} SET epoch = GREATEST(epoch, ?) WHERE lease_key = ''`),
	}
}

// replacer fills in a statement's templates and names.
type replacer func(string) string

func (r replacer) Replace(q string) string { return r(q) }
