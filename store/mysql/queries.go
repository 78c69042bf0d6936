package mysql

import "strings"

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
	probe, create            string
	takeOver, insert, holder string
	renew, renewed, release  string
	list, listAll, revoke    string

	// For Prune (prune.go).
	floorRow, lockFloor, pruneBatch, pruneBatchAll, lockDead, deleteKeys, raiseFloor string
}

func buildQueries(table string) queries {
	// The name has been validated as a plain identifier; the backticks
	// let it be a reserved word.
	t := "`" + table + "`"
	// A Replacer does not rescan what it put in, so {t} inside items is
	// replaced first.
	r := strings.NewReplacer("{items}", strings.ReplaceAll(items, "{t}", t), "{t}", t, "{now}", nowUS, "{start}", startUS)
	return queries{
		probe: r.Replace(`SELECT 1 FROM {t} LIMIT 0`),

		// renew_id is the random id of the last Renew call that extended the
		// term; see renewed.
		create: r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	lease_key  VARBINARY(512) NOT NULL,
	owner      VARBINARY(512) NOT NULL,
	epoch      BIGINT         NOT NULL,
	expires_at BIGINT         NOT NULL,
	released   BOOLEAN        NOT NULL DEFAULT FALSE,
	running    BOOLEAN        NOT NULL DEFAULT FALSE,
	updated_at BIGINT         NOT NULL,
	renew_id   BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (lease_key)
) ENGINE=InnoDB`),

		// Rules 1–2 for a key that has a record. The WHERE clause is read
		// once, on the row as locked (after any wait), before the SET
		// clause writes anything; LAST_INSERT_ID(expr) hands the new epoch
		// back in the OK packet, so the statement needs no second read.
		// Args: owner, ttl µs, running, key, owner, grace µs.
		takeOver: r.Replace(`UPDATE {t} SET
	owner = UNHEX(?),
	epoch = LAST_INSERT_ID(epoch + 1),
	expires_at = {now} + ?,
	released = FALSE,
	running = ?,
	updated_at = {now}
WHERE lease_key = UNHEX(?)
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

		holder: r.Replace(`SELECT owner, epoch, released, running, expires_at - {start}
FROM {t} WHERE lease_key = UNHEX(?)`),

		// Rule 3 for a whole batch. InnoDB locks each row before the
		// server evaluates WHERE and SET on it, so a renewal queued behind
		// a row lock checks liveness and stamps the expiry after its wait.
		// Args: items, ttl µs, renew id, owner.
		renew: r.Replace(`UPDATE {items}
SET l.expires_at = {now} + ?, l.running = j.r, l.updated_at = {now}, l.renew_id = ?
WHERE l.owner = UNHEX(?) AND NOT l.released AND l.expires_at > {now}`),

		// Which terms of a batch a renewal extended, when its row count
		// says not all: the rows that carry its id. Reading liveness
		// instead could credit this call with another call's renewal.
		// Args: items, renew id.
		renewed: r.Replace(`SELECT l.lease_key, l.epoch FROM {items} WHERE l.renew_id = ?`),

		// Rule 4: owner and epoch stay, so the record remembers the epoch;
		// expiry is stamped now. Args: items, owner.
		release: r.Replace(`UPDATE {items}
SET l.released = TRUE, l.running = FALSE, l.expires_at = {now}, l.updated_at = {now}
WHERE l.owner = UNHEX(?) AND NOT l.released`),

		// A byte range on the primary key: exact, and it stops at the end of
		// the prefix. The bounds are hex, so any byte may be in them.
		list: r.Replace(`SELECT lease_key, owner, epoch, released, running, expires_at - {start}
FROM {t} WHERE lease_key >= UNHEX(?) AND lease_key < UNHEX(?)
ORDER BY lease_key`),
		// For a prefix that no string is past (empty, or all 0xFF bytes).
		listAll: r.Replace(`SELECT lease_key, owner, epoch, released, running, expires_at - {start}
FROM {t} WHERE lease_key >= UNHEX(?) AND lease_key <> ''
ORDER BY lease_key`),

		// A live term moves to a new epoch owned by nobody. Its expiry is
		// kept: a holder that never hears of the revocation may run until
		// then, so peers wait for expiry + grace as after a crash.
		revoke: r.Replace(`UPDATE {t} SET
	owner = '',
	epoch = LAST_INSERT_ID(epoch + 1),
	released = FALSE,
	running = FALSE,
	updated_at = {now}
WHERE lease_key = UNHEX(?) AND NOT released AND owner <> '' AND expires_at > {now}`),

		// The floor row exists before an insert or a prune locks it, so
		// that the locks are on a record, not a gap (see ensureFloor).
		floorRow: r.Replace(`INSERT IGNORE INTO {t}
	(lease_key, owner, epoch, expires_at, released, running, updated_at)
VALUES ('', '', 0, 0, TRUE, FALSE, 0)`),
		lockFloor: r.Replace(`SELECT epoch FROM {t} WHERE lease_key = '' FOR UPDATE`),
		// The candidates of a batch: records under a prefix whose term
		// ended at least ? µs ago, past the last key of the batch before
		// (first '', so never the floor row). A plain read, which locks
		// nothing: in REPEATABLE READ a locking scan would lock every live
		// row it passes until the batch commits. Args: low bound, [high
		// bound,] after, age µs, batch size.
		pruneBatch: r.Replace(`SELECT lease_key FROM {t}
WHERE lease_key >= UNHEX(?) AND lease_key < UNHEX(?) AND lease_key > UNHEX(?) AND expires_at + ? <= {start}
ORDER BY lease_key LIMIT ?`),
		pruneBatchAll: r.Replace(`SELECT lease_key FROM {t}
WHERE lease_key >= UNHEX(?) AND lease_key > UNHEX(?) AND expires_at + ? <= {start}
ORDER BY lease_key LIMIT ?`),
		// The candidates still dead, locked by primary key, latest
		// version. Args: a JSON array of hex keys, age µs.
		lockDead: r.Replace(`SELECT l.lease_key, l.epoch FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET ascii PATH '$')) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k)
WHERE l.expires_at + ? <= {now}
FOR UPDATE`),
		// Args: a JSON array of hex keys.
		deleteKeys: r.Replace(`DELETE l FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(1024) CHARACTER SET ascii PATH '$')) AS j
	STRAIGHT_JOIN {t} AS l FORCE INDEX (PRIMARY) ON l.lease_key = UNHEX(j.k)`),
		raiseFloor: r.Replace(`UPDATE {t} SET epoch = GREATEST(epoch, ?) WHERE lease_key = ''`),
	}
}
