package sqlite

import "strings"

// nowUS is SQLite's clock in microseconds since the Unix epoch. SQLite keeps
// 'now' in whole milliseconds and holds it fixed for the whole statement, so
// every mention of it in one statement reads the same instant; ROUND undoes
// the binary fraction of the float seconds.
const nowUS = `(CAST(ROUND(unixepoch('subsec') * 1000.0) AS INTEGER) * 1000)`

// queries holds the SQL of one table, built once: the table name has been
// validated as a plain identifier, so it is spliced in without quoting.
type queries struct {
	create  string
	exists  string
	columns string
	index   string
	acquire string
	holder  string
	renew   string
	release string
	list    string
	listAll string
	revoke  string

	// For Prune (prune.go).
	pruneBatch, pruneBatchAll, raiseFloor, deleteKeys string

	// For the cross-process poller in poll.go.
	lastChange string
	changes    string
}

// nextChange numbers a write for the poller: one more than any change so far.
// Writers hold the write lock, so the numbers of successive commits only
// grow. SQLite evaluates an uncorrelated subquery once per statement, so a
// batch shares one number (and would be numbered upwards if it did not).
// The index on change_seq makes MAX a single seek.
const nextChange = `(SELECT COALESCE(MAX(c.change_seq), 0) + 1 FROM {t} AS c)`

// floor is the epoch floor: the highest epoch Prune deleted, kept in the
// row whose key is empty (no lease key is). Acquire reads it in the same
// statement, under the write lock Prune also takes, so a key acquired
// after its record was pruned starts above every epoch it had.
const floor = `(SELECT COALESCE(MAX(f.epoch), 0) FROM {t} AS f WHERE f.key = '')`

func buildQueries(table string) queries {
	r := strings.NewReplacer("{next}", strings.ReplaceAll(nextChange, "{t}", table),
		"{floor}", strings.ReplaceAll(floor, "{t}", table), "{t}", table, "{now}", nowUS)
	return queries{
		// WITHOUT ROWID stores rows in key order, which is what List and the
		// per-key lookups want. TEXT columns compare with BINARY collation:
		// byte for byte.
		create: r.Replace(`CREATE TABLE IF NOT EXISTS {t} (
	key        TEXT    NOT NULL PRIMARY KEY,
	owner      TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	released   INTEGER NOT NULL DEFAULT 0,
	running    INTEGER NOT NULL DEFAULT 0,
	updated_at INTEGER NOT NULL,
	change_seq    INTEGER NOT NULL DEFAULT 0,
	change_origin INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID`),
		// A read-only Store finds its table or fails; ?1 is the table name.
		exists: `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1`,
		// Tables made before change_seq existed get the columns by ALTER
		// TABLE (see Migrate); ?1 is the table name.
		columns: `SELECT name FROM pragma_table_info(?1)`,
		index:   r.Replace(`CREATE INDEX IF NOT EXISTS {t}_change_seq ON {t} (change_seq)`),

		// Rules 1 and 2 in one statement: a new key starts above the
		// epoch floor (1 until a prune raised it); an
		// existing one is taken over — epoch + 1 — only when released,
		// already ours, or expired at least grace ago. A refused takeover
		// returns no row and numbers no change. ?1 key, ?2 owner, ?3 ttl µs,
		// ?4 running, ?5 grace µs, ?6 the writing hub's origin.
		acquire: r.Replace(`INSERT INTO {t} (key, owner, epoch, expires_at, released, running, updated_at, change_seq, change_origin)
VALUES (?1, ?2, {floor} + 1, {now} + ?3, 0, ?4, {now}, {next}, ?6)
ON CONFLICT (key) DO UPDATE SET
	owner         = excluded.owner,
	epoch         = {t}.epoch + 1,
	expires_at    = excluded.expires_at,
	released      = 0,
	running       = excluded.running,
	updated_at    = excluded.updated_at,
	change_seq    = excluded.change_seq,
	change_origin = excluded.change_origin
WHERE {t}.released <> 0
	OR {t}.owner = excluded.owner
	OR {t}.expires_at + ?5 <= excluded.updated_at
RETURNING epoch`),

		holder: r.Replace(`SELECT owner, epoch, released, running, expires_at - {now}
FROM {t} WHERE key = ?1`),

		// One statement renews every item: ?3 is a JSON array of
		// [key, epoch, running] triples. Only owner's live, unreleased term
		// of that exact epoch is extended; the rows returned are the ones
		// renewed. ?1 owner, ?2 ttl µs. A renewal is not a change the
		// poller reports, so it leaves change_seq (and its index) alone.
		renew: r.Replace(`UPDATE {t} SET
	expires_at = {now} + ?2,
	running    = j.value ->> 2,
	updated_at = {now}
FROM json_each(?3) AS j
WHERE {t}.key = j.value ->> 0
	AND {t}.epoch = j.value ->> 1
	AND {t}.owner = ?1
	AND {t}.released = 0
	AND {t}.expires_at > {now}
RETURNING {t}.key, {t}.epoch`),

		// Release keeps owner and epoch, so the record still remembers the
		// epoch; expiry is stamped now and the key is free at once.
		// ?1 owner, ?2 a JSON array of [key, epoch] pairs, ?3 the writing
		// hub's origin.
		release: r.Replace(`UPDATE {t} SET
	released      = 1,
	running       = 0,
	expires_at    = {now},
	updated_at    = {now},
	change_seq    = {next},
	change_origin = ?3
FROM json_each(?2) AS j
WHERE {t}.key = j.value ->> 0
	AND {t}.epoch = j.value ->> 1
	AND {t}.owner = ?1
	AND {t}.released = 0
RETURNING {t}.key, {t}.epoch`),

		// A key range rather than LIKE, which folds ASCII case and treats
		// '_' and '%' as wildcards; the range is byte-exact and uses the
		// primary key. ?1 prefix, ?2 the first string past every key with it.
		list: r.Replace(`SELECT key, owner, epoch, released, running, expires_at - {now}
FROM {t} WHERE key >= ?1 AND key < ?2 ORDER BY key`),
		listAll: r.Replace(`SELECT key, owner, epoch, released, running, expires_at - {now}
FROM {t} WHERE key >= ?1 AND key <> '' ORDER BY key`),

		// A live term moves to a new epoch owned by nobody. Its expiry is
		// kept: the holder's next renewal is refused, but a holder that
		// never hears of it may run until that expiry, so peers wait for
		// expiry + grace as they would after a crash. Not numbered as a
		// change: it is neither an acquisition nor a release peers may act on.
		revoke: r.Replace(`UPDATE {t} SET
	owner      = '',
	epoch      = epoch + 1,
	released   = 0,
	running    = 0,
	updated_at = {now}
WHERE key = ?1 AND owner <> '' AND released = 0 AND expires_at > {now}
RETURNING epoch`),

		lastChange: r.Replace(`SELECT COALESCE(MAX(change_seq), 0) FROM {t}`),
		// ?1 the last change already seen.
		changes: r.Replace(`SELECT key, owner, epoch, released, change_seq, change_origin
FROM {t} WHERE change_seq > ?1 AND key <> '' ORDER BY change_seq`),

		// A batch of records whose term ended at least ?3 µs ago, in the
		// range [?1, ?2) or from ?1 on, past the last key of the batch
		// before (?5, first ''); never the floor row, whose key is ''.
		pruneBatch: r.Replace(`SELECT key, epoch, change_seq FROM {t}
WHERE key >= ?1 AND key < ?2 AND key > ?5 AND expires_at + ?3 <= {now}
ORDER BY key LIMIT ?4`),
		pruneBatchAll: r.Replace(`SELECT key, epoch, change_seq FROM {t}
WHERE key >= ?1 AND key > ?5 AND expires_at + ?3 <= {now}
ORDER BY key LIMIT ?4`),
		// The floor row keeps the highest epoch and change number deleted:
		// new keys start above the one, and the poller's numbering never
		// goes back below the other. ?1 epoch, ?2 change number.
		raiseFloor: r.Replace(`INSERT INTO {t} (key, owner, epoch, expires_at, released, running, updated_at, change_seq, change_origin)
VALUES ('', '', ?1, 0, 1, 0, {now}, ?2, 0)
ON CONFLICT (key) DO UPDATE SET
	epoch      = MAX({t}.epoch, excluded.epoch),
	change_seq = MAX({t}.change_seq, excluded.change_seq),
	updated_at = excluded.updated_at`),
		// ?1 a JSON array of keys.
		deleteKeys: r.Replace(`DELETE FROM {t} WHERE key IN (SELECT j.value FROM json_each(?1) AS j)`),
	}
}
