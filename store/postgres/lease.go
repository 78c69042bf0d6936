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
	"github.com/tenure-dev/tenure/store/internal/sqlstore"
)

// statements holds the SQL of one table, built once by buildStatements.
// Durations travel as microseconds (bigint) and are turned into intervals on
// the server, so no client clock is involved.
type statements struct {
	create, acquire, holder, renew, release, list, revoke string
	lock, prune, raiseFloor                               string
	promotionSQL
}

// eventJSON is the NOTIFY payload of one row, parsed by parseEvent. Keys
// and owners are at most 512 bytes without control characters, so the
// payload stays far below PostgreSQL's 8000-byte limit.
const eventJSON = `json_build_object('e', %s, 'k', l.key, 'o', l.owner, 'n', l.epoch)::text`

// buildStatements writes the statements of table t; identity says whether
// they name the server they run on (promotion.go).
func buildStatements(t string, identity bool) statements {
	p := buildPromotionSQL(t, identity)
	acquired := fmt.Sprintf(eventJSON, `'acquired'`)
	released := fmt.Sprintf(eventJSON, `'released'`)
	return statements{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	key        text COLLATE "C" PRIMARY KEY,
	owner      text        NOT NULL,
	epoch      bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	released   boolean     NOT NULL DEFAULT false,
	running    boolean     NOT NULL DEFAULT false,
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
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
		acquire: `INSERT INTO ` + t + ` AS l (key, owner, epoch, expires_at, released, running, updated_at)
SELECT $1::text, $2::text, f.epoch + 1, clock_timestamp() + $3::bigint * interval '1 microsecond', false, $5::boolean, clock_timestamp()
FROM ` + t + ` AS f
WHERE f.key = '' AND ` + p.named + `
	AND ($4::bigint = 0 OR f.updated_at + ($3::bigint + $4::bigint) * interval '1 microsecond' <= clock_timestamp())
ON CONFLICT (key) DO UPDATE SET
	owner = excluded.owner,
	epoch = GREATEST(l.epoch + 1, excluded.epoch),
	expires_at = clock_timestamp() + $3 * interval '1 microsecond',
	released = false,
	running = excluded.running,
	updated_at = clock_timestamp()
WHERE l.released
	OR l.owner = excluded.owner
	OR l.expires_at + $4 * interval '1 microsecond' <= clock_timestamp()
RETURNING l.epoch, pg_notify($6, ` + acquired + `)`,

		// The state of a key for a refused acquisition, and of the floor
		// row that may have refused it; sent in the same batch, so it costs
		// no extra round trip. It is a new statement with a new snapshot,
		// so it sees the row that blocked the INSERT even when that row was
		// committed after the INSERT began. The last column is how long
		// the failover quarantine keeps peers out, less the grace ($2 is
		// the TTL), in the form of a lease's time left.
		holder: `SELECT l.key IS NOT NULL, COALESCE(l.owner, ''), COALESCE(l.epoch, 0),
	COALESCE(l.released, false), COALESCE(l.running, false),
	COALESCE(NOT l.released AND l.owner <> '' AND l.expires_at > c.now, false),
	COALESCE((extract(epoch FROM l.expires_at - c.now) * 1000000)::bigint, 0),
	COALESCE(` + p.named + `, false),
	COALESCE((extract(epoch FROM f.updated_at - c.now) * 1000000)::bigint, 0) + $2::bigint
FROM (SELECT clock_timestamp() AS now) AS c
	LEFT JOIN ` + t + ` AS l ON l.key = $1
	LEFT JOIN ` + t + ` AS f ON f.key = ''`,

		// Rule 3 in one statement. A plain UPDATE computes its new row and
		// checks its WHERE before waiting for a row lock held by another
		// transaction, and does not recompute them when that transaction
		// only locked the row: a renewal queued behind SELECT … FOR UPDATE
		// would stamp an expiry from before its wait, and could renew a term
		// that expired during it. So the statement first locks the rows (in
		// key order, so two batches never deadlock), then reads the clock
		// once every lock is held (stamp depends on all of locked), and
		// only then checks liveness and stamps the expiry.
		renew: `WITH u AS (
	SELECT * FROM unnest($2::text[], $3::bigint[], $4::boolean[]) AS u(key, epoch, running)
), locked AS (
	SELECT l.key, l.epoch, u.running
	FROM ` + t + ` AS l JOIN u ON l.key = u.key COLLATE "C" AND l.epoch = u.epoch
	WHERE l.owner = $1 AND NOT l.released
	ORDER BY l.key
	FOR UPDATE OF l
), stamp AS (
	SELECT clock_timestamp() AS now FROM (SELECT count(*) FROM locked) AS c
)
UPDATE ` + t + ` AS l SET
	expires_at = stamp.now + $5 * interval '1 microsecond',
	running = locked.running,
	updated_at = stamp.now
FROM locked, stamp
WHERE l.key = locked.key AND l.epoch = locked.epoch
	AND l.owner = $1 AND NOT l.released AND l.expires_at > stamp.now
RETURNING l.key, l.epoch`,

		// Rule 4 in one statement, locking in key order like renew. The
		// new row (and so clock_timestamp()) is computed above the join with
		// locked, after the lock. NOTIFY is delivered at commit.
		release: `WITH u AS (
	SELECT * FROM unnest($2::text[], $3::bigint[]) AS u(key, epoch)
), locked AS (
	SELECT l.key, l.epoch
	FROM ` + t + ` AS l JOIN u ON l.key = u.key COLLATE "C" AND l.epoch = u.epoch
	WHERE l.owner = $1 AND NOT l.released
	ORDER BY l.key
	FOR UPDATE OF l
)
UPDATE ` + t + ` AS l SET
	released = true,
	running = false,
	expires_at = clock_timestamp(),
	updated_at = clock_timestamp()
FROM locked
WHERE l.key = locked.key AND l.epoch = locked.epoch AND l.owner = $1 AND NOT l.released
RETURNING pg_notify($4, ` + released + `)`,

		// One clock reading for every row, so TimeLeft values are mutually
		// consistent. The "C" collation makes both the prefix test and the
		// order byte-exact.
		list: `SELECT l.key, l.owner, l.epoch, l.released, l.running,
	NOT l.released AND l.owner <> '' AND l.expires_at > c.now,
	(extract(epoch FROM l.expires_at - c.now) * 1000000)::bigint
FROM ` + t + ` AS l, (SELECT clock_timestamp() AS now) AS c
WHERE l.key >= $1 AND starts_with(l.key, $1) AND l.key <> ''
ORDER BY l.key`,

		// A new epoch owned by nobody; the expiry is kept, since a holder
		// that never hears of the revocation may run until it: its next
		// renewal is refused, and peers wait for expiry + grace.
		// Above the floor too: after a promotion (recordServer runs first,
		// in the same transaction) the old primary may have issued l.epoch
		// + 1 already.
		revoke: `UPDATE ` + t + ` AS l SET
	owner = '',
	epoch = GREATEST(l.epoch, (SELECT COALESCE(max(f.epoch), 0) FROM ` + t + ` AS f WHERE f.key = '')) + 1,
	released = false,
	running = false,
	updated_at = clock_timestamp()
WHERE l.key = $1 AND NOT l.released AND l.owner <> '' AND l.expires_at > clock_timestamp()
RETURNING l.epoch, pg_notify($2, ` + acquired + `)`,

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
			AND p.expires_at + $2 * interval '1 microsecond' <= clock_timestamp()
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
	)
	if err == nil {
		res, floor, err = readAcquire(br, req.Key, req.Grace)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return res, floor, err
}

func readAcquire(br pgx.BatchResults, key string, grace time.Duration) (store.AcquireResult, floorCheck, error) {
	var epoch int64
	err := br.QueryRow().Scan(&epoch, nil)
	switch {
	case err == nil:
		return store.AcquireResult{Acquired: true, Epoch: epoch}, floorPassed, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return store.AcquireResult{}, floorPassed, err
	}
	h := store.Lease{Key: key}
	var (
		exists, sameServer bool
		left, quarantine   int64
	)
	err = br.QueryRow().Scan(&exists, &h.Owner, &h.Epoch, &h.Released, &h.Running, &h.Live, &left, &sameServer, &quarantine)
	if err != nil {
		return store.AcquireResult{}, floorPassed, fmt.Errorf("read holder: %w", err)
	}
	h.TimeLeft = time.Duration(left) * time.Microsecond
	switch {
	case !sameServer:
		return store.AcquireResult{Holder: h}, floorOtherServer, nil
	case grace > 0 && !h.Live && quarantine > -grace.Microseconds() && (!exists || quarantine > left):
		// The failover quarantine, not the key's own record, keeps the
		// caller out: report it as a term of nobody's that ends with it,
		// grace included, as a record's expiry would be.
		h = store.Lease{Key: key, Epoch: h.Epoch, Live: quarantine > 0, TimeLeft: time.Duration(quarantine) * time.Microsecond}
	case !exists:
		// No record, no quarantine, the server named: the INSERT ran
		// before another session's first write of the floor row.
		return store.AcquireResult{Holder: h}, floorChanged, nil
	}
	return store.AcquireResult{Holder: h}, floorPassed, nil
}

// Renew extends every listed term of owner in one statement.
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
	keys := make([]string, len(items))
	epochs := make([]int64, len(items))
	running := make([]bool, len(items))
	for i, it := range items {
		keys[i], epochs[i], running[i] = it.Key, it.Epoch, it.Running
	}
	pool, onLane := s.lane.take(s.pool)
	if onLane {
		defer s.lane.put()
	}
	rows, err := pool.Query(ctx, s.sql.renew, owner, keys, epochs, running, ttl.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("postgres: renew %d leases: %w", len(items), err)
	}
	renewed := make(map[store.Term]bool, len(items))
	var t store.Term
	_, err = pgx.ForEachRow(rows, []any{&t.Key, &t.Epoch}, func() error {
		renewed[t] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: renew %d leases: %w", len(items), err)
	}
	for i, it := range items {
		out[i] = renewed[store.Term{Key: it.Key, Epoch: it.Epoch}]
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
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("postgres: release %d leases: %w", len(terms), err)
	}
	return nil
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
	rows, err := s.pool.Query(ctx, s.sql.list, sent)
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
	var epoch int64
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		st := s.statements()
		if _, err := tx.Exec(ctx, st.recordServer); err != nil {
			return err
		}
		return tx.QueryRow(ctx, st.revoke, key, s.table).Scan(&epoch, nil)
	})
	if err != nil && s.identityUnsupported(err) {
		return s.Revoke(ctx, key)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("postgres: revoke %q: %w", key, err)
	}
	return true, nil
}
