package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/internal/sessionbook"
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

// statements holds the SQL of one table, built once by buildStatements.
// Durations travel as microseconds (bigint) and are turned into intervals on
// the server, so no client clock is involved.
type statements struct {
	create, acquire, holder, release, list, listLegacy, revoke string
	lock, prune, raiseFloor                                    string
	promotionSQL
}

// eventJSON is the NOTIFY payload of one row, parsed by parseEvent. Keys
// and owners are at most 512 bytes without control characters, so the
// payload stays far below PostgreSQL's 8000-byte limit.
const eventJSON = `json_build_object('e', %s, 'k', l.key, 'o', l.owner, 'n', l.epoch)::text`

// buildStatements writes the statements of table t, whose sessions are in
// table sess (session.go); identity says whether they name the server they
// run on (promotion.go).
func buildStatements(t, sess string, identity bool) statements {
	p := buildPromotionSQL(t, identity)
	acquired := fmt.Sprintf(eventJSON, `'acquired'`)
	released := fmt.Sprintf(eventJSON, `'released'`)
	withSession := `LEFT JOIN ` + sess + ` AS x ON x.id = l.session AND l.session <> 0`
	pruneExpiry := `CASE WHEN p.session = 0 THEN p.expires_at
				ELSE COALESCE((SELECT x.expires_at FROM ` + sess + ` AS x WHERE x.id = p.session), 'epoch') END`
	return statements{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	key        text COLLATE "C" PRIMARY KEY,
	owner      text        NOT NULL,
	epoch      bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	released   boolean     NOT NULL DEFAULT false,
	running    boolean     NOT NULL DEFAULT false,
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	session    bigint      NOT NULL DEFAULT 0
)`,

		// Rules 1–2. ON CONFLICT locks the existing row before it evaluates
		// the WHERE and SET clauses, so their clock_timestamp() is read after
		// any wait; excluded.expires_at is not used for that reason (the
		// inserted row is computed before the wait). The row comes from the
		// floor row, and only when the floor row names the server the
		// statement runs on and no failover quarantine is on (see
		// promotion.go): otherwise nothing is inserted or updated, and the
		// holder statement says why. excluded.epoch is the floor + 1, so a
		// key's epoch also rises past every epoch a lost primary may have
		// issued; a prune cannot raise the floor meanwhile (its table lock
		// waits for this statement).
		// Rules 1–2. The term starts on its own record; the next renewal
		// that lists it puts it on its owner's session (session.go). When
		// the key's record is on a session, that session is locked first
		// and its expiry read, with the clock, once it is held, so a
		// takeover never reads an expiry a renewal is moving on; the
		// session the record leaves moves to a new version. ON CONFLICT
		// locks the existing row before it evaluates the WHERE and SET
		// clauses, so their clock_timestamp() is read after any wait;
		// excluded.expires_at is not used for that reason (the inserted
		// row is computed before the wait). The row comes from the floor
		// row, and only when the floor row names the server the statement
		// runs on and no failover quarantine is on (see promotion.go):
		// otherwise nothing is inserted or updated, and the holder
		// statement says why. excluded.epoch is the floor + 1, so a key's
		// epoch also rises past every epoch a lost primary may have
		// issued; a prune cannot raise the floor meanwhile (its table lock
		// waits for this statement). A record that moved to another
		// session since the statement's snapshot is refused, and the
		// refusal retried (sqlstore.Acquire) if its holder's term is over.
		acquire: `WITH cur AS (
	SELECT l.session FROM ` + t + ` AS l WHERE l.key = $1 AND l.session <> 0
), ls AS (
	SELECT s.id, s.expires_at FROM ` + sess + ` AS s WHERE s.id = (SELECT session FROM cur) FOR UPDATE
), ins AS (
	INSERT INTO ` + t + ` AS l (key, owner, epoch, expires_at, released, running, updated_at, session)
	SELECT $1::text, $2::text, f.epoch + 1, clock_timestamp() + $3::bigint * interval '1 microsecond',
		false, $5::boolean, clock_timestamp(), 0
	FROM ` + t + ` AS f
	WHERE (SELECT count(*) FROM ls) >= 0 AND f.key = '' AND ` + p.named + `
		AND ($4::bigint = 0 OR f.updated_at + ($3::bigint + $4::bigint) * interval '1 microsecond' <= clock_timestamp())
	ON CONFLICT (key) DO UPDATE SET
		owner = excluded.owner,
		epoch = GREATEST(l.epoch + 1, excluded.epoch),
		expires_at = clock_timestamp() + $3 * interval '1 microsecond',
		released = false,
		running = excluded.running,
		updated_at = clock_timestamp(),
		session = 0
	WHERE l.session = COALESCE((SELECT session FROM cur), 0)
		AND (l.released
			OR l.owner = excluded.owner
			OR (CASE WHEN l.session = 0 THEN l.expires_at ELSE COALESCE((SELECT ls.expires_at FROM ls), 'epoch') END)
				+ $4 * interval '1 microsecond' <= clock_timestamp())
	RETURNING l.epoch, pg_notify($6, ` + acquired + `) AS n
), departed AS (
	UPDATE ` + sess + ` AS s SET ` + bump + `
	FROM ins WHERE s.id = (SELECT session FROM cur)
	RETURNING s.id, s.version, s.tag, s.prev_tag
)
SELECT ins.epoch, COALESCE((SELECT id FROM departed), 0), COALESCE((SELECT version FROM departed), 0),
	COALESCE((SELECT tag FROM departed), 0), COALESCE((SELECT prev_tag FROM departed), 0), ins.n
FROM ins`,

		// The state of a key for a refused acquisition, and of the floor
		// row that may have refused it; sent in the same batch, so it costs
		// no extra round trip. It is a new statement with a new snapshot,
		// so it sees the row that blocked the INSERT even when that row was
		// committed after the INSERT began. The last column is how long
		// the failover quarantine keeps peers out, less the grace ($2 is
		// the TTL), in the form of a lease's time left.
		holder: `SELECT l.key IS NOT NULL, COALESCE(l.owner, ''), COALESCE(l.epoch, 0),
	COALESCE(l.released, false), COALESCE(l.running, false),
	COALESCE(NOT l.released AND l.owner <> '' AND ` + expiry + ` > c.now, false),
	COALESCE((extract(epoch FROM ` + expiry + ` - c.now) * 1000000)::bigint, 0),
	COALESCE(` + p.named + `, false),
	COALESCE((extract(epoch FROM f.updated_at - c.now) * 1000000)::bigint, 0) + $2::bigint
FROM (SELECT clock_timestamp() AS now) AS c
	LEFT JOIN ` + t + ` AS l ON l.key = $1
	` + withSession + `
	LEFT JOIN ` + t + ` AS f ON f.key = ''`,

		// Rule 4 in one statement: the sessions of the records first, then
		// the records in key order. The new row (and so clock_timestamp())
		// is computed above the join with locked, after the lock. Each
		// session a term left moves to a new version (session.go). NOTIFY
		// is delivered at commit.
		release: `WITH u AS (
	SELECT * FROM unnest($2::text[], $3::bigint[]) AS u(key, epoch)
), cur AS (
	SELECT DISTINCT l.session FROM ` + t + ` AS l JOIN u ON l.key = u.key COLLATE "C" AND l.epoch = u.epoch
	WHERE l.owner = $1 AND NOT l.released AND l.session <> 0
), ls AS (
	SELECT s.id FROM ` + sess + ` AS s WHERE s.id IN (SELECT session FROM cur) ORDER BY s.id FOR UPDATE
), locked AS (
	SELECT l.key, l.epoch, l.session
	FROM ` + t + ` AS l JOIN u ON l.key = u.key COLLATE "C" AND l.epoch = u.epoch
	WHERE (SELECT count(*) FROM ls) >= 0 AND l.owner = $1 AND NOT l.released
	ORDER BY l.key
	FOR UPDATE OF l
), rel AS (
	UPDATE ` + t + ` AS l SET
		released = true,
		running = false,
		expires_at = clock_timestamp(),
		updated_at = clock_timestamp(),
		session = 0
	FROM locked
	WHERE l.key = locked.key AND l.epoch = locked.epoch AND l.owner = $1 AND NOT l.released
	RETURNING l.key, l.epoch, locked.session AS was, pg_notify($4, ` + released + `) AS n
), bump AS (
	UPDATE ` + sess + ` AS s SET ` + bump + `
	WHERE s.id IN (SELECT was FROM rel)
	RETURNING s.id, s.version, s.tag, s.prev_tag
)
SELECT rel.key, rel.epoch, rel.was, COALESCE(bump.version, 0), COALESCE(bump.tag, 0), COALESCE(bump.prev_tag, 0), rel.n
FROM rel LEFT JOIN bump ON bump.id = rel.was`,

		// One clock reading for every row, so TimeLeft values are mutually
		// consistent. The "C" collation makes both the prefix test and the
		// order byte-exact.
		list: `SELECT l.key, l.owner, l.epoch, l.released, l.running,
	NOT l.released AND l.owner <> '' AND ` + expiry + ` > c.now,
	(extract(epoch FROM ` + expiry + ` - c.now) * 1000000)::bigint
FROM ` + t + ` AS l ` + withSession + `, (SELECT clock_timestamp() AS now) AS c
WHERE l.key >= $1 AND starts_with(l.key, $1) AND l.key <> ''
ORDER BY l.key`,
		// list, of a table made before sessions (a read-only Store's).
		listLegacy: `SELECT l.key, l.owner, l.epoch, l.released, l.running,
	NOT l.released AND l.owner <> '' AND l.expires_at > c.now,
	(extract(epoch FROM l.expires_at - c.now) * 1000000)::bigint
FROM ` + t + ` AS l, (SELECT clock_timestamp() AS now) AS c
WHERE l.key >= $1 AND starts_with(l.key, $1) AND l.key <> ''
ORDER BY l.key`,

		// A new epoch owned by nobody; the expiry is kept (a term on a
		// session leaves it with the session's expiry of now, read under
		// its lock), since a holder that never hears of the revocation may
		// run until it: its next renewal is refused, and peers wait for
		// expiry + grace. The session moves to a new version.
		// Above the floor too: after a promotion (recordServer runs first,
		// in the same transaction) the old primary may have issued l.epoch
		// + 1 already.
		revoke: `WITH cur AS (
	SELECT l.session FROM ` + t + ` AS l WHERE l.key = $1
), ls AS (
	SELECT s.id, s.expires_at FROM ` + sess + ` AS s WHERE s.id = (SELECT session FROM cur) FOR UPDATE
), c AS (
	SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM ls) AS n
), rv AS (
	UPDATE ` + t + ` AS l SET
		owner = '',
		epoch = GREATEST(l.epoch, (SELECT COALESCE(max(f.epoch), 0) FROM ` + t + ` AS f WHERE f.key = '')) + 1,
		released = false,
		running = false,
		updated_at = c.now,
		expires_at = CASE WHEN l.session = 0 THEN l.expires_at ELSE (SELECT ls.expires_at FROM ls) END,
		session = 0
	FROM c
	WHERE l.key = $1 AND NOT l.released AND l.owner <> '' AND l.session = COALESCE((SELECT session FROM cur), 0)
		AND (CASE WHEN l.session = 0 THEN l.expires_at ELSE (SELECT ls.expires_at FROM ls) END) > c.now
	RETURNING l.epoch, pg_notify($2, ` + acquired + `) AS n
), bump AS (
	UPDATE ` + sess + ` AS s SET ` + bump + ` FROM rv WHERE s.id = (SELECT session FROM cur)
)
SELECT epoch, n FROM rv`,

		lock: `LOCK TABLE ` + t + ` IN SHARE ROW EXCLUSIVE MODE`,
		// A batch of records whose term ended at least $2 µs ago, under
		// prefix ($1 is its longest valid UTF-8 part, $3 all its bytes),
		// past the last key of the batch before ($5, first ''; so never
		// the floor row, whose key is '').
		prune: `WITH d AS (
	DELETE FROM ` + t + ` AS l WHERE l.key IN (
		SELECT p.key FROM ` + t + ` AS p
		WHERE p.key >= $1 AND starts_with(p.key, $1) AND p.key > $5
			AND substr(convert_to(p.key, 'UTF8'), 1, octet_length($3::bytea)) = $3::bytea
			AND ` + pruneExpiry + ` + $2 * interval '1 microsecond' <= clock_timestamp()
		ORDER BY p.key LIMIT $4)
	RETURNING l.key, l.epoch
)
SELECT count(*), COALESCE(max(epoch), 0), COALESCE(max(key), '') FROM d`,
		promotionSQL: p,
		raiseFloor: `INSERT INTO ` + t + ` AS l (key, owner, epoch, expires_at, released, updated_at)
VALUES ('', '', $1, '-infinity', true, 'epoch')
ON CONFLICT (key) DO UPDATE SET epoch = GREATEST(l.epoch, excluded.epoch)`,
	}
}

// Acquire starts a new term of req.Key for req.Owner when the key is free,
// or reports the lease that blocks it. One round trip either way.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (_ store.AcquireResult, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateAcquire(req); err != nil {
		return store.AcquireResult{}, err
	}
	if err := s.access.Write(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	// The holder is read by a second statement of the batch, so a refusal
	// by a term that ended in between is retried.
	res, err := sqlstore.Acquire(ctx, req, s.acquireOnce)
	if err != nil {
		return store.AcquireResult{}, fmt.Errorf("postgres: acquire %q: %w", req.Key, err)
	}
	return res, nil
}

func (s *Store) acquireOnce(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	// At most: a fall-back to the plain statements, recording the server, and a
	// try that no longer races the floor row's first write.
	for try := 1; ; try++ {
		st := s.statements()
		res, floor, err := s.acquireBatch(ctx, st, req)
		switch {
		case err != nil && try < 4 && s.identityUnsupported(err):
			continue
		case err != nil || floor == floorPassed || try == 4:
			return res, err
		case floor == floorOtherServer:
			// A promotion (see promotion.go), or no server named yet.
			if err := s.recordServer(ctx, st); err != nil {
				return store.AcquireResult{}, err
			}
		}
	}
}

// floorCheck is what the floor row said of an acquisition.
type floorCheck int

const (
	floorPassed      floorCheck = iota // granted, or refused by the key's record or a quarantine
	floorOtherServer                   // refused: the floor row names another server, or is missing
	floorChanged                       // refused, but the floor row named this server by the time of the holder statement
)

// acquireBatch tries once, and reports what the floor row said.
func (s *Store) acquireBatch(ctx context.Context, st *statements, req store.AcquireRequest) (store.AcquireResult, floorCheck, error) {
	// The term starts on its own record; the owner's session is opened
	// now, once, so that the renewal that puts the term on it is one
	// statement on the renewal's connection, as a renewal was before
	// sessions (a slow network leaves a call room for little more).
	if _, err := s.session(ctx, s.pool, req.Owner, req.TTL); err != nil {
		return store.AcquireResult{}, floorPassed, err
	}

	// READ COMMITTED whatever the connection's default: only then is the
	// statement's snapshot taken after the table lock a prune holds, so
	// that a key pruned meanwhile starts above the raised floor (see
	// prune.go). Under REPEATABLE READ or SERIALIZABLE the snapshot is
	// taken before the wait and the old floor would be read. Same round
	// trip: the batch is one pipeline.
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue(st.acquire, req.Key, req.Owner, req.TTL.Microseconds(), req.Grace.Microseconds(), req.Running, s.table)
	b.Queue(st.holder, req.Key, req.TTL.Microseconds())
	b.Queue("COMMIT")
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var (
		res   store.AcquireResult
		floor floorCheck
		moved sessionMove
	)
	if err == nil {
		res, moved, floor, err = readAcquire(br, req.Key, req.Grace)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && res.Acquired {
		if moved.left != 0 {
			s.book.Left(moved.left, moved.version, store.Term{Key: req.Key})
		}
		s.book.Acquired(req.Owner, req.TTL, req.Key, res.Epoch, req.Running)
	}
	return res, floor, err
}

// sessionMove is the session an acquisition took the key's record off
// (session.go), and the version it moved it to.
type sessionMove struct {
	left    int64
	version sessionbook.Version
}

func readAcquire(br pgx.BatchResults, key string, grace time.Duration) (store.AcquireResult, sessionMove, floorCheck, error) {
	var (
		epoch int64
		m     sessionMove
	)
	err := br.QueryRow().Scan(&epoch, &m.left, &m.version.N, &m.version.Tag, &m.version.Prev, nil)
	switch {
	case err == nil:
		return store.AcquireResult{Acquired: true, Epoch: epoch}, m, floorPassed, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return store.AcquireResult{}, m, floorPassed, err
	}
	h := store.Lease{Key: key}
	var (
		exists, sameServer bool
		left, quarantine   int64
	)
	err = br.QueryRow().Scan(&exists, &h.Owner, &h.Epoch, &h.Released, &h.Running, &h.Live, &left, &sameServer, &quarantine)
	if err != nil {
		return store.AcquireResult{}, m, floorPassed, fmt.Errorf("read holder: %w", err)
	}
	h.TimeLeft = time.Duration(left) * time.Microsecond
	switch {
	case !sameServer:
		return store.AcquireResult{Holder: h}, m, floorOtherServer, nil
	case grace > 0 && !h.Live && quarantine > -grace.Microseconds() && (!exists || quarantine > left):
		// The failover quarantine, not the key's own record, keeps the
		// caller out: report it as a term of nobody's that ends with it,
		// grace included, as a record's expiry would be.
		h = store.Lease{Key: key, Epoch: h.Epoch, Live: quarantine > 0, TimeLeft: time.Duration(quarantine) * time.Microsecond}
	case !exists:
		// No record, no quarantine, the server named: the INSERT ran
		// before another session's first write of the floor row.
		return store.AcquireResult{Holder: h}, m, floorChanged, nil
	}
	return store.AcquireResult{Holder: h}, m, floorPassed, nil
}

// Renew extends every listed term of owner in one statement: one that
// writes the owner's session alone when its terms are the ones listed
// (session.go).
func (s *Store) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) (_ []bool, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateRenew(owner, ttl, items); err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	if len(items) == 0 {
		return out, nil
	}
	if err := s.access.Write(ctx); err != nil {
		return nil, err
	}
	pool, onLane := s.lane.take(s.pool)
	if onLane {
		defer s.lane.put()
	}
	renewed, err := s.renew(ctx, pool, owner, ttl, items)
	if err != nil {
		return nil, fmt.Errorf("postgres: renew %d leases: %w", len(items), err)
	}
	for i, it := range items {
		out[i] = renewed == nil || renewed[store.Term{Key: it.Key, Epoch: it.Epoch}]
	}
	return out, nil
}

// Release ends every listed term of owner in one statement and notifies
// watchers of each term it ended.
func (s *Store) Release(ctx context.Context, owner string, terms []store.Term) (err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateRelease(owner, terms); err != nil {
		return err
	}
	if len(terms) == 0 {
		return nil
	}
	if err := s.access.Write(ctx); err != nil {
		return err
	}
	keys := make([]string, len(terms))
	epochs := make([]int64, len(terms))
	for i, t := range terms {
		keys[i], epochs[i] = t.Key, t.Epoch
	}
	// An asynchronous commit: the release does not wait for its WAL to
	// reach the disk (or a synchronous standby), which takes a flush off
	// every graceful handoff. Losing it in a crash only delays: the term
	// is then held again until its expiry + grace, by a holder that has
	// stopped. And no peer can act on it before then without a commit of
	// its own, which flushes the WAL up to it first. The NOTIFY is sent
	// at commit either way.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit TO off")
	b.Queue(s.sql.release, owner, keys, epochs, s.table)
	b.Queue("COMMIT")
	left, err := s.sendRelease(ctx, b)
	if err != nil {
		return fmt.Errorf("postgres: release %d leases: %w", len(terms), err)
	}
	// One statement moved each session one version, for all its terms.
	bySession := map[int64][]store.Term{}
	versions := map[int64]sessionbook.Version{}
	for _, l := range left {
		bySession[l.session] = append(bySession[l.session], l.term)
		versions[l.session] = l.version
	}
	for id, ts := range bySession {
		s.book.Left(id, versions[id], ts...)
	}
	return nil
}

// leftSession is a term a release ended, the session it took it off (0:
// none) and the version it moved that session to.
type leftSession struct {
	term    store.Term
	session int64
	version sessionbook.Version
}

// sendRelease runs a release batch and returns the terms it ended, once
// the batch has committed.
func (s *Store) sendRelease(ctx context.Context, b *pgx.Batch) ([]leftSession, error) {
	br := s.pool.SendBatch(ctx, b)
	var left []leftSession
	_, err := br.Exec() // BEGIN
	if err == nil {
		_, err = br.Exec() // SET LOCAL
	}
	if err == nil {
		var (
			rows pgx.Rows
			l    leftSession
		)
		if rows, err = br.Query(); err == nil {
			_, err = pgx.ForEachRow(rows, []any{&l.term.Key, &l.term.Epoch, &l.session, &l.version.N, &l.version.Tag, &l.version.Prev, nil}, func() error {
				left = append(left, l)
				return nil
			})
		}
	}
	if err == nil {
		_, err = br.Exec() // COMMIT
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return left, nil
}

// List returns every lease whose key starts with prefix, sorted by key.
func (s *Store) List(ctx context.Context, prefix string) (_ []store.Lease, err error) {
	defer func() { err = denied(err) }()
	if err := s.access.Read(ctx); err != nil {
		return nil, err
	}
	// Keys are valid UTF-8 without NUL, but a prefix may cut a character
	// in two ("\xc3" is a byte prefix of "é"), which PostgreSQL refuses as
	// text. Query with the longest valid part and finish the test here.
	if strings.IndexByte(prefix, 0) >= 0 {
		return nil, nil
	}
	sent := validPrefix(prefix)
	query, err := s.listSQL(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, err)
	}
	rows, err := s.pool.Query(ctx, query, sent)
	if err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, err)
	}
	var (
		out  []store.Lease
		l    store.Lease
		left int64
	)
	_, err = pgx.ForEachRow(rows, []any{&l.Key, &l.Owner, &l.Epoch, &l.Released, &l.Running, &l.Live, &left}, func() error {
		if len(sent) < len(prefix) && !strings.HasPrefix(l.Key, prefix) {
			return nil
		}
		l.TimeLeft = time.Duration(left) * time.Microsecond
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list %q: %w", prefix, err)
	}
	return out, nil
}

// validPrefix returns the longest prefix of s that is valid UTF-8.
func validPrefix(s string) string {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return s[:i]
		}
		i += size
	}
	return s
}

// Revoke fences the current term of key: it moves the key to a new epoch
// owned by nobody and keeps its expiry, so peers wait for expiry + grace.
// It reports false when the key has no live term.
func (s *Store) Revoke(ctx context.Context, key string) (_ bool, err error) {
	defer func() { err = denied(err) }()
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := s.access.Write(ctx); err != nil {
		return false, err
	}
	// The statement finds the record's session in its snapshot; a record
	// that moved onto or off a session since is not revoked, and the
	// revocation goes again while the key has a live term.
	for try := 1; ; try++ {
		revoked, err := s.revokeOnce(ctx, key)
		if err != nil && s.identityUnsupported(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("postgres: revoke %q: %w", key, err)
		}
		if revoked || try == 3 {
			return revoked, nil
		}
		ls, err := s.List(ctx, key)
		if err != nil {
			return false, err
		}
		if len(ls) == 0 || ls[0].Key != key || !ls[0].Live {
			return false, nil
		}
	}
}

func (s *Store) revokeOnce(ctx context.Context, key string) (bool, error) {
	var epoch int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		st := s.statements()
		if _, err := tx.Exec(ctx, st.recordServer); err != nil {
			return err
		}
		return tx.QueryRow(ctx, st.revoke, key, s.table).Scan(&epoch, nil)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
