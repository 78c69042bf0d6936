// Package etcd is Tenure's lease store on etcd (v3 API, server 3.4 or
// newer), built on go.etcd.io/etcd/client/v3.
//
//	s, err := etcd.Open(ctx, "etcd://10.0.0.5:2379,10.0.0.6:2379", etcd.Options{})
//	// or, with a client you configured:
//	s, err := etcd.New(client, etcd.Options{Prefix: "billing"})
//
// # Clock: the server's leases
//
// etcd has no clock a transaction can read, so time is kept the way etcd
// keeps it: by leases, which the leader expires on its own monotonic clock.
//
// # Sessions: one keep-alive per process
//
// As etcd's concurrency package puts every mutex of a process on one
// session, the store puts every term of an owner (one per process: the
// engine's owner ids carry an incarnation) with one TTL and grace on one
// lease, its session, granted for ttl + grace seconds. A term's live key
// is on the session; while it exists, peers stay out. The session's first
// ttl seconds are the term's live part and its last grace seconds the
// grace: the term is live while the session has at least the grace left
// (TimeToLive reports whole seconds rounded down, so this test is exact).
//
// Renew, for the terms this store put on a session, sends two calls
// whatever their number, and writes nothing:
//
//  1. TimeToLive of the session with its attached keys: a session with
//     less than its grace left has ended its live part, and every term on
//     it is lost (and not kept alive: peers wait out the grace);
//  2. a keep-alive, sent after the renewal began, so every term on the
//     session ends no earlier than that + ttl, and peers wait the grace
//     more.
//
// A term is renewed when its live key was on the session in step 1 and
// this store still remembers putting that term there. A key can leave the
// session between the two steps only by a release (which forgets the term
// first), a new term (likewise), a revocation or an eviction; the last two
// put a grace key on a lease of ttl + grace that is kept alive once more
// after their write, so peers wait until a full ttl + grace after it, past
// any deadline a renewal found the key for. A write whose answer was lost
// leaves that lease to expire, never revokes it. A changed running flag is written to
// the record. Any other listed term — acquired by another store of the
// same owner, from before sessions, evicted — is read, and if current
// with its live part not over, moved onto the session (put on its lease,
// after a keep-alive of it).
//
// Acquire keeps the session alive while it works, so the new term ends no
// earlier than the call's start + ttl, unless the caller lets it date the
// term back (AcquireRequest.MaxElapsed): a session whose last keep-alive
// (a renewal's or an acquisition's) was sent that recently and found it
// alive lives until at least that send + ttl + grace, so the term goes on
// it as it is, dated from that send (AcquireResult.Elapsed), with no
// keep-alive to wait for, as a mutex goes on its session. When the owner has a session a
// renewal kept alive lately, a key with no record is claimed in one
// transaction, as etcd's mutex claims one: it creates the record and puts
// the live key on the session if the key has none of its keys, and reads
// the key otherwise (unread.go). A key with a record is read (by that
// transaction, or by a read of its own), and one transaction then writes
// the record and puts the live key on the session. Claiming many keys
// costs one write each and no lease grant. Calls that keep the session
// alive and overlap share keep-alives: each waits for one sent after it
// began (keepalive.go), so a burst of acquisitions that may not be dated
// sends about one per round trip, not one each.
// Only a session a renewal kept alive within the last ttl is kept alive
// by an acquisition; otherwise a free key gets a new session (a refused
// acquisition grants none). So a session its renewals left ends, with
// every term on it, however many acquisitions its owner goes on trying.
//
// Shared fate, and its bound: keeping a session alive keeps every term on
// it alive. A term whose holder stops renewing it without a release (it
// gave up on a deadline, or left a runner that would not stop to expire)
// would live on while the holder renews its other terms. So a renewal
// evicts from the session every term no renewal listed for a whole ttl
// (its holder's deadline has certainly passed): its live key goes, and a
// grace key on a lease of ttl + grace, granted then, keeps peers out
// until no deadline the holder was ever told of can be running. Such a
// term ends at most 2·ttl + grace + a renewal period after its last
// renewal, instead of ttl + grace. Released terms are not affected.
//
// Losing the session — the process froze or lost etcd for longer than the
// ttl — fails every term on it closed, as one: the next Renew reports all
// of them lost, and peers wait out the grace.
//
// Lease TTLs are whole seconds and etcd raises any TTL below its floor
// (1.5 election timeouts, 2s with the defaults). Both are rounded up — the
// ttl to whole seconds and at least the floor, the grace to whole seconds
// — which only makes a term end later than the holder's deadline (send
// time + ttl) and a peer wait longer: the fail-closed timing rule holds.
// Time left is reported from TimeToLive, which etcd rounds down to whole
// seconds; the store reports the middle of that second, so Lease.TimeLeft
// is within about half a second of the truth. The leader deletes the keys
// of an expired lease on a 500ms tick: a term looks live, and blocks
// peers, up to about half a second past its expiry. Use a TTL of several
// seconds (the default 15s is fine) with this store.
//
// The grace that counts is the one the term was acquired with, kept in its
// record and in the session it is on: the holder's, not the acquiring
// peer's. The two differ only when replicas are configured with
// different graces, and the holder's is the one its timing relies on.
//
// Close does not revoke sessions: a runner left to expire may still be
// running, so its terms run out on their own.
//
// # Layout
//
// Under "/<prefix>/leases/" (prefix default "tenure") each lease key K has
//
//	K "\x00r"  record, no lease, deleted only by Prune: "epoch\towner\tstate\trunning\tgrace"
//	K "\x00l"  live key, on a session: "epoch\towner"
//	K "\x00g"  grace key, only for a term moved off its session without
//	           ending (revoked or evicted), or written before sessions
//	K "\x00m"  prune mark: when Prune first saw the record dead (prune.go)
//
// Keys hold no control characters, so NUL separates K from the suffix and
// etcd's byte order of these names is the byte order of the keys: List is
// one range read (in pages of 15,000 etcd keys at one revision), plus one
// TimeToLive per distinct lease — a few sessions, however many terms.
// State is held, released or revoked; a revoked record has no owner. A
// peer may acquire when neither the live nor the grace key is left.
//
// Terms written before sessions (a live key on a lease of ttl seconds and
// a grace key on one of ttl + grace) still count: peers wait for both
// keys, List reads the live lease, and the holder's next renewal moves
// the term onto its session.
//
// # Epochs
//
// A new term's epoch is max(the record's epoch + 1, the store revision at
// its read + 1). The first part is the usual "one more"; the second keeps
// epochs rising even if someone deletes the namespace, since etcd's
// revision never goes back and every earlier epoch is at most the revision
// of the write that stored it. Epochs are therefore large numbers.
//
// A key claimed without a read (no record) has as epoch the revision of
// the transaction that claimed it: above every earlier epoch for the same
// reason. That revision is known only once the transaction has run, so
// the record and the live key hold 0 in the epoch's place, and the epoch
// is their create revision, which etcd keeps until a key is deleted
// (record.go). The write that ends or replaces the term writes the epoch
// out. A transaction that must find such a term compares the value and
// the create revision; a release, which may not know the form, tries both
// in nested transactions (etcd compares have no "or"). A Tenure from
// before this form lists such a term with epoch 0 and still acquires it
// safely, with an epoch above it.
//
// Release is one round trip: per term, a nested transaction that compares
// the record with the term (epoch, owner, held — written so that it matches
// whatever the running flag and grace are) and then marks it released and
// deletes its keys; in its else, the same for the term's implicit form.
//
// # What this does not cover
//
//   - A leader change extends every lease by up to its full TTL (etcd 3.4
//     does not checkpoint remaining TTLs by default): terms end later,
//     never earlier, so peers wait longer.
//   - Released terms report a time left of 0 and terms past their grace
//     -grace: etcd dates neither moment.
//   - Mixed versions: Tenure before sessions revokes a term by deleting
//     its live key and trusting its grace key, which a term on a session
//     does not have, so its revocation frees such a term at once. Upgrade
//     whatever revokes (tenure release, tenure console's revoke) with or
//     before the replicas.
//   - Revoking a session lease by hand (etcdctl lease revoke) deletes its
//     live keys at once, as revoking any lease does: peers may start
//     while the holder still runs. Tenure never revokes a session.
//   - Writes accumulate history: run etcd with --auto-compaction-retention
//     as usual. Steady-state renewals write nothing.
//   - Move a namespace to another cluster only by snapshot restore, which
//     keeps revisions. A key-by-key copy (etcdctl make-mirror, a dump and
//     load) keeps neither leases nor create revisions: terms would never
//     end, and a held term's implicit epoch would become the copy's
//     revision, which may be lower.
//   - Deleting a term's record by hand does not free its key: peers wait
//     for the live and grace keys left behind, as for any term (the time
//     left they are told may be too long by up to the term's grace, which
//     the record kept). List shows no lease for such a key.
//
// # Events
//
// [Store.Watch] is an etcd watch on the records: a new epoch is an
// Acquired event, a release a Released event.
package etcd
