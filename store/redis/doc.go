// Package redis is Tenure's lease store on Redis (single node, Sentinel or
// Cluster), built on github.com/redis/go-redis/v9.
//
//	s, err := redis.Open(ctx, "redis://:secret@10.0.0.5:6379/0", redis.Options{})
//	// Sentinel: the host is a Sentinel, addr= adds more, master_name= names the master
//	s, err := redis.Open(ctx, "redis://:secret@10.0.0.7:26379/0?master_name=mymaster&addr=10.0.0.8:26379&addr=10.0.0.9:26379", redis.Options{})
//	// or, with a client you configured (Cluster, TLS, …):
//	s, err := redis.New(client, redis.Options{Namespace: "billing"})
//
// # Layout
//
// A namespace (default "tenure") owns four names, all with the hash tag
// {namespace} so that they share one Cluster slot and the batched scripts
// can touch every lease in one call:
//
//	{tenure}:leases    hash: lease key → "epoch,expiry,released,running,owner"
//	{tenure}:keys      sorted set of lease keys, all scores 0 (byte order)
//	{tenure}:sessions  hash: session id → "expiry,version,tag,prev,records,owner"
//	{tenure}:events    pub/sub channel of acquisitions and releases
//
// One packed field per lease keeps memory small — measured on Redis 7.0 at
// 100,000 leases with 19-byte keys and 8-byte owners: 268 bytes per lease,
// about half for the hash and half for the index — and lets List read a
// prefix as a ZRANGEBYLEX range plus HMGET inside a script: no HSCAN, no
// per-key round trip. List reads 5,000 records per script call, page after
// page, so a namespace of 100,000 leases never blocks Redis for one long
// script; each page carries its own reading of the server clock.
//
// Records carry no Redis TTL: they stay after release and expiry, so an
// epoch is never forgotten while the data survives. Only [Store.Prune]
// (tenure prune) deletes them, a page at a time, raising the epoch floor
// kept in the hash field "" in the same script.
// A revoked term is a record with an empty owner.
//
// # Sessions: one small write per renewal
//
// A process's renewal reads and writes one field, its session, however
// many terms it holds (10,000 terms: 0.4–0.6 ms for Store.Renew, about
// 0.1 ms of it in Redis, against 31–33 ms renewing each record;
// BENCHMARKS.md). A term starts on its own record; the renewal after its
// acquisition puts it on the session of its owner and TTL, and from then
// on the record's expiry field holds 2126-01-01 plus the session's id,
// and the term ends when the session does. A renewal that lists exactly
// the terms its Store knows on the session (and terms acquired since)
// renews the session alone; any other — after a revocation, a release
// through another Store, a lost answer, and at least once a minute — goes
// term by term onto a new session, 1,000 terms a script call, all in one
// round trip. Terms it does
// not list stay on the old session, which nobody renews any more, and end
// with it: a term its holder gave up on without a release ends on its own
// within a TTL.
//
// Upgrading: scripts now also name {ns}:sessions, so an ACL user limited
// to a namespace's keys needs a pattern that covers it (~{tenure}:* does);
// and Redis must not evict Tenure's keys (maxmemory-policy noeviction, or
// a volatile-* policy: they carry no TTL). A session evicted or deleted
// by hand leaves its records without an end: the next acquisition of such
// a key gives its term one a TTL later (List shows it live meanwhile).
//
// Versions before sessions read a record on a session as a term live for a
// century: they never take such a key over, so during a rolling upgrade
// only upgraded replicas take over the keys of an upgraded replica that
// died. An older version's revocation of a term on a session reaches the
// holder at its next renewal term by term, within a minute; revoke with
// this version to fence at once. To downgrade, stop every replica, let
// their terms end, and run this version's tenure prune.
//
// # Clock and atomicity
//
// Every operation is one Lua script (EVALSHA, falling back to EVAL when the
// server lost its script cache). Scripts read the server's own TIME, in
// microseconds, so expiry never comes from a client clock. Renewal term by
// term and release handle up to 1,000 terms per script call; larger
// batches are split into several calls sent in one pipeline, which is
// still one round trip.
// Redis 5 or newer is required (scripts that call TIME before writing).
//
// # Epochs survive lost data
//
// A new term's epoch is max(stored epoch + 1, server time in µs). While the
// record exists this is the usual "one more than before"; when Redis lost it
// (a restart without persistence, a FLUSHALL), the clock part still puts the
// new epoch above every earlier one, because each earlier epoch was at most
// the server time of its own acquisition plus the number of acquisitions of
// that key within the same microseconds. Epochs are therefore large numbers
// (about 1.8e15 in 2026), well inside int64 and exact in Lua's doubles.
//
// # Failover
//
// Redis acknowledges a write before its replicas have it, so a replica
// promoted by a failover (Sentinel, Cluster, or by hand) may lack the
// primary's last acquisitions and renewals. Every Redis server has a
// replication id, and a promotion or a restart gives it a new one. The
// acquisition script compares it with the one recorded in the namespace
// (hash field "\0server"); on the first acquisition after a change, it
// grants no term that asks for a grace for TTL + grace, so that every
// holder whose term was lost has failed closed (its renewals are refused,
// or cannot reach the store) before a peer starts the key. Terms the new
// primary holds renew on. Epochs need no help: the clock part of the rule
// above already puts the next one above every lost one.
//
// A client that had an answer from the namespace before and finds it
// empty (the server lost everything, or a failover lost its first writes)
// starts the quarantine too.
//
// The replication id also changes where nothing was lost, and each change
// costs one quarantine: every restart (AOF or not), attaching the first
// replica to a lone primary, the replication backlog freed after
// repl-backlog-ttl without replicas, a planned FAILOVER.
//
// What this does not cover:
//
//   - A client whose ACL denies INFO (it is in @dangerous, which many
//     deny: grant +info) checks nothing. It still keeps to a quarantine
//     another client started, and writes nothing that could end one.
//   - A server that lost everything, seen first by a client new to the
//     namespace, looks new and gets no quarantine. Give Redis persistence
//     where that matters.
//   - Split brain: an old primary cut off but alive keeps its id and goes
//     on granting and renewing to the clients that still reach it. Fence
//     it (min-replicas-to-write, or a failover manager that stops it).
//   - Clocks that go back. If the promoted replica's or restarted server's
//     clock is behind the old server's by more than the time since the last
//     acquisition, a key whose record was lost can get an epoch that an
//     earlier term already had. Keep server clocks synchronised (NTP) and
//     prefer persistence (AOF with appendfsync everysec or always) where
//     fencing matters.
//
// # Events
//
// Acquire publishes an Acquired event and Release a Released event on the
// namespace's channel, from inside the script. [Store.Watch] subscribes to it;
// on Cluster the channel is an ordinary (not sharded) one, so any node
// serves the subscription. Events are hints: a subscription that breaks
// closes the watch channel and events in the gap are lost.
//
// # Timeouts
//
// Store calls end at their context deadline only if the client honours
// deadlines: [Open] sets ContextTimeoutEnabled, and [New] rejects go-redis
// clients that do not have it.
package redis
