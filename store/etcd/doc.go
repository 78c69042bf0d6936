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
// Every term is held by two etcd keys on two leases:
//
//   - a live key on a lease of ttl seconds — while it exists, the term is
//     live; renewals refresh it;
//   - a grace key on a lease of ttl + grace seconds, granted or refreshed
//     after the live lease — while it exists, peers stay out.
//
// A peer may acquire when neither key is left (or the term was released),
// so it starts no earlier than the term's expiry + grace on the leader's
// clock. A transaction compares the record and the keys' presence, so the
// decision is atomic even though no clock is read.
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
// record and in the length of its grace lease: the holder's, not the
// acquiring peer's. The two differ only when replicas are configured with
// different graces, and the holder's is the one its timing relies on.
//
// # Layout
//
// Under "/<prefix>/leases/" (prefix default "tenure") each lease key K has
//
//	K "\x00r"  record, no lease, deleted only by Prune: "epoch\towner\tstate\trunning\tgrace"
//	K "\x00l"  live key: "epoch\towner"
//	K "\x00g"  grace key: "epoch"
//	K "\x00m"  prune mark: when Prune first saw the record dead (prune.go)
//
// Keys hold no control characters, so NUL separates K from the suffix and
// etcd's byte order of these names is the byte order of the keys: List is
// one range read (in pages of 15,000 etcd keys at one revision). State is
// held, released or revoked; a revoked record has no owner.
//
// # Epochs
//
// A new term's epoch is max(the record's epoch + 1, the store revision at
// its read + 1). The first part is the usual "one more"; the second keeps
// epochs rising even if someone deletes the namespace, since etcd's
// revision never goes back and every earlier epoch is at most the revision
// of the write that stored it. Epochs are therefore large numbers.
//
// # Batched renewal
//
// Renew reads every listed key (transactions of up to --max-txn-ops prefix
// reads, sent together), and then, for the terms still current:
//
//   - every pair of leases that an earlier renewal bound terms to, when all
//     of those terms are listed and still on it, is kept alive: one
//     keep-alive for the live lease and, once that succeeded, one per grace
//     lease. Nothing is written, so steady renewals do not grow etcd's
//     history, whatever the number of keys;
//   - the remaining terms (newly acquired, or from a pair that lost a term
//     the caller no longer lists, or a revoked one) are bound to one live
//     lease and one grace lease per grace, granted now for the whole call:
//     their live and grace keys are re-put in transactions of up to
//     --max-txn-ops - 3 terms sent together, each term in a nested
//     transaction guarded by its live key, so every term is renewed or lost
//     on its own.
//
// The store remembers, per owner, which terms each pair holds; terms only
// leave a pair (release, revocation, a new term), so the memory can only
// be too large — which makes the pair be rebound, never kept alive with a
// stranger on it. An owner's terms sit on at most four pairs: a renewal
// that would need a fifth folds the smallest into its new one. A changed
// running flag is written to the record.
//
// A keep-alive of an expired lease fails, so an expired term is never
// renewed that way. A rebind may renew a term in the half second its
// expired live key lingers; no peer can have taken it meanwhile (the live
// key still blocks), so this never makes two holders.
//
// Release is one round trip: per term, a nested transaction that compares
// the record with the term (epoch, owner, held — written so that it matches
// whatever the running flag and grace are) and then marks it released and
// deletes both keys.
//
// # What this does not cover
//
//   - A leader change extends every lease by up to its full TTL (etcd 3.4
//     does not checkpoint remaining TTLs by default): terms end later,
//     never earlier, so peers wait longer.
//   - Released terms report a time left of 0 and terms past their grace
//     -grace: etcd dates neither moment.
//   - Each acquisition grants two leases of its own; its first renewal
//     moves the term onto a shared pair. Until then List asks TimeToLive
//     once per such term (about 4,000 a second on a small server).
//   - Writes accumulate history: run etcd with --auto-compaction-retention
//     as usual. Steady-state renewals write nothing.
//
// # Events
//
// [Store.Watch] is an etcd watch on the records: a new epoch is an
// Acquired event, a release a Released event.
package etcd
