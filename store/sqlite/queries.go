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
	release string
	list    string
	listAll string
	revoke  string

	// For sessions (session.go).
	createSessions, sessionIndex, revokedTrigger, sessionOf, sessionLive, newSession, bumpSession,
	bumpSessionsOf, renewSession, setRunning, joinSession, detachAll, renewTerms,
	extendSession, sessionsOf, pruneSessions string

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

// expiry is a record's expiry: its own, or its session's while it is on
// one (session.go). A session that is gone counts as long expired: one is
// deleted only once dead and with no record on it.
const expiry = `(CASE WHEN {t}.session = 0 THEN {t}.expires_at ELSE COALESCE((SELECT x.expires_at FROM {s} AS x WHERE x.id = {t}.session), 0) END)`

// onSession is the expires_at of a record on a session: far enough ahead
// that a version of this package without sessions, which reads only this
// column, sees the term as live and never takes it over (about the year
// 2128), and near enough that its time left still fits a time.Duration.
const onSession = "5000000000000000"

// replacer fills in a query's templates and names.
type replacer func(string) string

func (r replacer) Replace(q string) string { return r(q) }

// buildQueries writes the queries of table; sessions says whether the
// table has the session column (a read-only Store may open a table made
// before sessions, and reads each record's own expiry then).
func buildQueries(table string, sessions bool) queries {
	exp := expiry
	if !sessions {
		exp = "{t}.expires_at"
	}
	// Templates first (they name {t} and {now} themselves), then names.
	tmpl := strings.NewReplacer("{next}", nextChange, "{floor}", floor, "{exp}", exp)
	leave := ",\n\tsession       = 0" // the term starts on its own record
	if !sessions {
		leave = ""
	}
	// Every change to a session's terms: the next version, a new tag,
	// and the tag it had (sessionbook).
	const bump = "version = version + 1, prev_tag = tag, tag = random()"
	names := strings.NewReplacer("{t}", table, "{s}", sessionTable(table), "{now}", nowUS, "{far}", onSession,
		"{leave}", leave, "{bump}", bump)
	r := replacer(func(q string) string { return names.Replace(tmpl.Replace(q)) })
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
	change_origin INTEGER NOT NULL DEFAULT 0,
	session       INTEGER NOT NULL DEFAULT 0
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
	change_origin = excluded.change_origin{leave}
WHERE {t}.released <> 0
	OR {t}.owner = excluded.owner
	OR {exp} + ?5 <= excluded.updated_at
RETURNING epoch`),

		holder: r.Replace(`SELECT owner, epoch, released, running, {exp} - {now}
FROM {t} WHERE key = ?1`),

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
	change_origin = ?3,
	session       = 0
FROM json_each(?2) AS j
WHERE {t}.key = j.value ->> 0
	AND {t}.epoch = j.value ->> 1
	AND {t}.owner = ?1
	AND {t}.released = 0
RETURNING {t}.key, {t}.epoch`),

		// A key range rather than LIKE, which folds ASCII case and treats
		// '_' and '%' as wildcards; the range is byte-exact and uses the
		// primary key. ?1 prefix, ?2 the first string past every key with it.
		list: r.Replace(`SELECT key, owner, epoch, released, running, {exp} - {now}
FROM {t} WHERE key >= ?1 AND key < ?2 ORDER BY key`),
		listAll: r.Replace(`SELECT key, owner, epoch, released, running, {exp} - {now}
FROM {t} WHERE key >= ?1 AND key <> '' ORDER BY key`),

		// A live term moves to a new epoch owned by nobody. Its expiry is
		// kept (a term on a session leaves it with the session's expiry
		// of now): the holder's next renewal is refused, but a holder that
		// never hears of it may run until that expiry, so peers wait for
		// expiry + grace as they would after a crash. Not numbered as a
		// change: it is neither an acquisition nor a release peers may act on.
		revoke: r.Replace(`UPDATE {t} SET
	owner      = '',
	epoch      = epoch + 1,
	released   = 0,
	running    = 0,
	updated_at = {now},
	expires_at = {exp},
	session    = 0
WHERE key = ?1 AND owner <> '' AND released = 0 AND {exp} > {now}
RETURNING epoch`),

		// Sessions (session.go). AUTOINCREMENT: an id is never used twice,
		// so a Store that remembers a session deleted since can never
		// renew another process's.
		createSessions: r.Replace(`CREATE TABLE IF NOT EXISTS {s} (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	owner      TEXT    NOT NULL,
	expires_at INTEGER NOT NULL,
	version    INTEGER NOT NULL DEFAULT 0,
	tag        INTEGER NOT NULL DEFAULT 0,
	prev_tag   INTEGER NOT NULL DEFAULT 0
)`),
		sessionIndex: r.Replace(`CREATE INDEX IF NOT EXISTS "{t}:session" ON {t} (session)`),
		// A version of this package from before sessions revokes a term by
		// setting its owner to '' and knows nothing of its session: this
		// takes such a term off its session, with the session's expiry of
		// then, and moves the session to a new version, so that its
		// holder's next renewal goes term by term and finds it lost. This
		// package's own revocation takes the term off in the same write,
		// which the WHEN clause tells apart.
		revokedTrigger: r.Replace(`CREATE TRIGGER IF NOT EXISTS "{t}:revoked" AFTER UPDATE OF owner ON {t}
WHEN OLD.session <> 0 AND NEW.session = OLD.session AND NEW.owner = ''
BEGIN
	UPDATE {t} SET session = 0,
		expires_at = COALESCE((SELECT x.expires_at FROM {s} AS x WHERE x.id = OLD.session), 0)
	WHERE key = NEW.key;
	UPDATE {s} SET {bump} WHERE id = OLD.session;
END`),
		// ?1 key: the session its record is on, or no row.
		sessionOf: r.Replace(`SELECT session FROM {t} WHERE key = ?1 AND session <> 0`),
		// ?1 id, ?2 owner.
		sessionLive: r.Replace(`SELECT expires_at > {now} FROM {s} WHERE id = ?1 AND owner = ?2`),
		// ?1 owner, ?2 ttl µs.
		newSession: r.Replace(`INSERT INTO {s} (owner, expires_at, version, tag) VALUES (?1, {now} + ?2, 0, random())
RETURNING id, version, tag`),
		// ?1 id: a term was put on the session or taken off. Every such
		// change draws a new tag as well (sessionbook).
		bumpSession: r.Replace(`UPDATE {s} SET {bump} WHERE id = ?1 RETURNING version, tag, prev_tag`),
		// Sessions that listed terms of owner ?1 are on, other than ?2:
		// those terms leave them (a release, or a renewal that moves them
		// onto ?2). ?3 a JSON array of [key, epoch, …].
		bumpSessionsOf: r.Replace(`UPDATE {s} SET {bump}
WHERE id <> ?2 AND id IN (
	SELECT {t}.session FROM {t} JOIN json_each(?3) AS j ON {t}.key = j.value ->> 0 AND {t}.epoch = j.value ->> 1
	WHERE {t}.owner = ?1 AND {t}.released = 0 AND {t}.session <> 0)`),
		// The renewal of a Store that knows every term on its session at
		// version ?4 and tag ?6: the session alone, and one version more
		// when it puts terms on (?5 is 1 then). ?1 id, ?2 owner, ?3 ttl µs.
		renewSession: r.Replace(`UPDATE {s} SET expires_at = {now} + ?3, version = version + ?5,
	tag = CASE WHEN ?5 > 0 THEN random() ELSE tag END,
	prev_tag = CASE WHEN ?5 > 0 THEN tag ELSE prev_tag END
WHERE id = ?1 AND owner = ?2 AND version = ?4 AND tag = ?6 AND expires_at > {now} RETURNING version, tag`),
		// ?1 session, ?2 a JSON array of [key, epoch, running] triples.
		setRunning: r.Replace(`UPDATE {t} SET running = j.value ->> 2
FROM json_each(?2) AS j
WHERE {t}.key = j.value ->> 0 AND {t}.epoch = j.value ->> 1 AND {t}.session = ?1`),
		// Terms acquired since the last renewal go onto session ?2 if
		// they are still owner's (?1), on their own record, unreleased and
		// live. ?3 a JSON array of [key, epoch, running] triples.
		joinSession: r.Replace(`UPDATE {t} SET session = ?2, expires_at = {far}, running = j.value ->> 2
FROM json_each(?3) AS j
WHERE {t}.key = j.value ->> 0
	AND {t}.epoch = j.value ->> 1
	AND {t}.owner = ?1
	AND {t}.released = 0
	AND {t}.session = 0
	AND {t}.expires_at > {now}
RETURNING {t}.key, {t}.epoch`),
		// Every term on session ?1 comes off it, expiring when the session
		// would now; renewTerms then puts back those listed. What stays
		// off is a term no renewal wants (its holder gave up on it), which
		// then ends on its own instead of living as long as the session.
		detachAll: r.Replace(`UPDATE {t} SET session = 0,
	expires_at = (SELECT x.expires_at FROM {s} AS x WHERE x.id = ?1)
WHERE session = ?1`),
		// Rule 3 for the listed terms, which go onto session ?2 (live):
		// only owner's live, unreleased term of that exact epoch. ?1 owner,
		// ?3 a JSON array of [key, epoch, running] triples.
		renewTerms: r.Replace(`UPDATE {t} SET session = ?2, expires_at = {far}, running = j.value ->> 2
FROM json_each(?3) AS j
WHERE {t}.key = j.value ->> 0
	AND {t}.epoch = j.value ->> 1
	AND {t}.owner = ?1
	AND {t}.released = 0
	AND {exp} > {now}
RETURNING {t}.key, {t}.epoch, {t}.running`),
		// ?1 session, ?2 ttl µs.
		extendSession: r.Replace(`UPDATE {s} SET expires_at = {now} + ?2, {bump}
WHERE id = ?1 RETURNING version, tag`),
		// ?1 owner, ?2 a JSON array of [key, epoch] pairs: the session of
		// each term a release ends.
		sessionsOf: r.Replace(`SELECT {t}.key, {t}.epoch, {t}.session
FROM {t} JOIN json_each(?2) AS j ON {t}.key = j.value ->> 0 AND {t}.epoch = j.value ->> 1
WHERE {t}.owner = ?1 AND {t}.released = 0`),
		// Sessions dead for ?1 µs with no record on them.
		pruneSessions: r.Replace(`DELETE FROM {s} WHERE expires_at + ?1 <= {now}
	AND NOT EXISTS (SELECT 1 FROM {t} WHERE {t}.session = {s}.id)`),

		lastChange: r.Replace(`SELECT COALESCE(MAX(change_seq), 0) FROM {t}`),
		// ?1 the last change already seen.
		changes: r.Replace(`SELECT key, owner, epoch, released, change_seq, change_origin
FROM {t} WHERE change_seq > ?1 AND key <> '' ORDER BY change_seq`),

		// A batch of records whose term ended at least ?3 µs ago, in the
		// range [?1, ?2) or from ?1 on, past the last key of the batch
		// before (?5, first ''); never the floor row, whose key is ''.
		pruneBatch: r.Replace(`SELECT key, epoch, change_seq FROM {t}
WHERE key >= ?1 AND key < ?2 AND key > ?5 AND {exp} + ?3 <= {now}
ORDER BY key LIMIT ?4`),
		pruneBatchAll: r.Replace(`SELECT key, epoch, change_seq FROM {t}
WHERE key >= ?1 AND key > ?5 AND {exp} + ?3 <= {now}
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
