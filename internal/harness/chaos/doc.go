// Package chaos is the fault-injection harness behind `tenure verify`: it
// runs several replicas of a Tenure supervisor as separate OS processes on
// a real store, injects faults on a seeded schedule, and checks from what
// every process wrote down that the guarantees held.
//
// # The replicas
//
// [Run] re-executes a binary (a test binary, or the tenure CLI's hidden
// replica subcommand) with the environment variable [ReplicaEnv] set; that
// binary must call [ReplicaMain] before doing anything else (see
// [IsReplica]). Each replica runs a supervisor for a few scratch keys with
// short timing (TTL 2s, grace 1s, renewal every 600ms) and a runner that
//
//   - records when its work starts and stops, with a heartbeat while it
//     runs, stamped with the host's CLOCK_MONOTONIC, which every process on
//     the host shares;
//   - repeatedly reads, "thinks" for up to two renewal intervals, and then
//     writes with its epoch to a resource that refuses stale epochs itself:
//     a table guarded by the fence package in the server under test
//     (PostgreSQL, MySQL) or in an SQLite file (SQLite, Redis), or an etcd
//     key put by a transaction that compares the epoch stored in it (etcd).
//     The resource is reached directly, not through the proxy. The think
//     time deliberately ignores cancellation, like a process frozen between
//     deciding to write and writing: the fence, not the lease timing, must
//     order those writes.
//
// Every other key's work (the first, the third, …) runs in a child
// process instead, the way `tenure run` runs a command: started through
// internal/cli/child's guard with the lease's safety deadline (Lease.StopAt),
// each later one forwarded after a confirmed renewal by the helper the CLI
// uses (child.ForwardStopAt). The child is the same binary in worker mode
// (ReplicaMain serves the guard and the worker too): it gets the lease in
// TENURE_KEY, TENURE_EPOCH and TENURE_OWNER, runs the same workload until
// SIGTERM, and logs to its replica's log, each record carrying its pid.
// The replica records each child's start, every deadline it passes on,
// and how the child ended (the guard's own stop counts as a deadline
// stop). Half the keys keep the cost at one guard and one child per held
// key on a two-core host, and the other half keep in-process work tested.
//
// With Options.PoolKeys, every replica also shares that many keys in a
// pool (pool.go), with the same in-process workload recorded under each
// key's lease key, so the checks of overlaps, epochs and fencing cover the
// pool's hand-overs; MinHold is five renewal periods, so a run sees many.
//
// Every store call (Acquire, Renew, Release, List) goes through a
// recorder that logs its send time and outcome. Each record is one
// write(2) to an O_APPEND file, so a replica killed with SIGKILL leaves a
// log complete up to its last record.
//
// A replica's first record names the owner id its supervisor acquires
// leases as (Supervisor.Owner) next to the name it was configured with
// (Config.Owner). The two need not be equal, and two processes may share
// a configured name: the harness finds holders, and the checker tells
// processes apart, by replica name and that id, never by the configured
// name.
//
// # The faults
//
// One at a time (or Options.Concurrency at once, on replicas of their
// own), from a schedule drawn from the seed (math/rand/v2); the first
// steps go through every enabled kind once (Options.Faults), then kinds
// are drawn by weight. Once Options.Duration is up no fault starts, and
// the replicas run on, without faults, until the takeover bound (the pool
// bound, with a pool; see The checks) has passed since the last fault
// ended, so that the run still measures what that fault set off:
//
//   - kill: SIGKILL a holder; a replacement starts within a TTL.
//   - pause: SIGSTOP a holder for 0.5–4×TTL, then SIGCONT.
//   - freeze-wrapper: SIGSTOP, for 0.5–4×TTL, a holder of a key whose work
//     runs as a child, once that child runs; neither its guard nor the
//     child (each in a process group of its own) is stopped. Renewals
//     stop, a peer takes the key at expiry + grace, and only the guard can
//     stop the child in time: at the deadline it was last given, SIGTERM,
//     then SIGKILL after the stop timeout. The same on every backend.
//   - partition: the store unreachable from one replica or all, 1–3×TTL.
//   - hold-replies: requests commit, their replies are held back.
//   - lose-replies: requests commit, their replies are dropped and their
//     connections cut, for 0.1–0.75×TTL: the replica hears of each failure at
//     once and is soon answered again, so it goes on from writes it was
//     told had failed (an acquisition it does not know it won, a release
//     or renewal that did happen).
//   - latency: added one-way latency, up to 3/4 of the call timeout.
//   - restart: SIGTERM a holder (graceful handoff); a replacement starts.
//   - log-stall: a holder's log sink blocks for 1–3×TTL, as stderr does
//     when it is a full pipe or a log shipper is stuck. The replica's
//     slog.Handler waits at a gate the harness closes with SIGUSR1 and
//     opens with SIGUSR2 (the same on every backend; a replica is
//     signalled only once its first record shows it listens). Three
//     stalls in four cut the holder off from the store for RenewEvery +
//     2×CallTimeout early on, so it has a failed renewal to log and its
//     deadline falls inside the stall: an engine that logs on the path to
//     its deadline stop, or in its renewal loop, keeps working past it.
//   - slow-store: every call of one replica, or of all, answers 0.6–0.9
//     call timeouts late, for 2–4×TTL: through the proxy, the added time
//     spread over the round trips of the store's slowest steady call (one
//     on PostgreSQL and Redis, two on MySQL, three on etcd), half each way;
//     half before and half after the call in the recorder for SQLite.
//     Nothing fails; a holder must keep its keys.
//   - same-owner: an extra replica starts configured with a live holder's
//     owner name (a hostname shared by host-networked containers, a copied
//     unit file), both run for 1.5–3×TTL, and the extra one is stopped
//     gracefully, so the population returns to its size. An engine whose
//     store owner id is the configured name lets the two take keys from
//     each other and run them at once.
//   - abandon: two renewal periods after it is drawn (so the term has
//     been renewed, and is on its holder's session where the store has
//     sessions), a holder of two keys or more (of one, when no replica
//     holds two) leaves one of them out of its renewals, answered lost to
//     its engine, which stops the runner and lists the term no more, and
//     refuses to acquire that key, for 5–6×TTL: a term its holder gave up
//     on without a release, while its other terms are renewed. A store
//     that keeps a process's terms alive together must end this one on
//     its own; played in the replica's store recorder, on every backend.
//   - store-restart: the store itself crashes and comes back, or fails
//     over to a replica (Options.RestartStore: a Redis restart, an etcd
//     member's death, a PostgreSQL standby or a Redis replica promoted
//     after its primary's host died with the replica behind; tenure
//     verify --failover-cmd). A store that may fail over keeps no fenced
//     resource: its acknowledged writes may be lost.
//   - source-down (with a pool only): a holder is restarted gracefully as
//     a replica whose pool key source fails (a command missing from a new
//     image), and the source is mended after 5–7×TTL. It must take no
//     share of keys it cannot run: when it joined the pool anyway, its
//     peers stopped claiming at their lowered caps and keys went from
//     one to another with none running them.
//   - low-max (with a pool only): a holder is restarted gracefully as a
//     replica whose pool takes at most one key (--max 1), among peers
//     without a limit, and stays so. Every replica must plan with each
//     worker's own limit: when each used its own for all, the uncapped
//     ones kept handing the capped one keys it shed again, and keys ran
//     nowhere meanwhile.
//
// PostgreSQL, MySQL, Redis and etcd are reached through in-process TCP
// proxies, one per replica and store endpoint, and nothing else: the SQL
// stores and Redis get their proxy's address in the URL (a PostgreSQL URL
// listing a primary and its standbys, one per host); etcd's gRPC
// client keeps its endpoints (so TLS checks the servers' names) and dials
// each through its proxy, refusing any address it has none for. A network
// fault strikes all of a replica's proxies at once. SQLite has no network,
// and a Redis Sentinel URL gets the master's address from the Sentinels
// at run time, where no proxy made beforehand stands in for it; for those
// the network faults are emulated inside the replica's store recorder,
// driven by a control file the harness writes. The fault kinds and their
// parameters replay exactly from a seed and a set of kinds; which process holds which key at each
// moment does not, since it depends on the operating system's scheduling.
//
// # The checks
//
// [Check] reads a [History] (all logs merged on the shared clock) and
// reports, per invariant: no two processes' work on a key overlaps (a
// frozen process's interval is suspended while it is stopped, and it must
// stop promptly once it resumes; a killed process's work ends at the
// moment it died; a child's work is never suspended by its wrapper's
// freeze, since it runs on, and ends when its wrapper dies unless it goes
// on beating); fenced writes are accepted in non-decreasing epoch
// order and a stale one is always refused; no epoch is issued to two
// processes, even two the store knows by one owner id; no term is granted
// to another process before its predecessor's expiry + grace (measured
// from its last confirmed renewal); a crashed holder is replaced within
// TTL + grace + one renewal interval + slack; a term its holder abandoned
// (the abandon fault) lets a peer run the key within that bound after the
// last call naming it (on etcd, which evicts it a TTL later, TTL + a
// renewal interval + 1s more); a runner stopped for lack of
// renewals (a child its guard stopped while its wrapper was frozen too)
// stops at least RenewEvery + Grace before a peer starts, unless its term
// was released before the peer started; and,
// during a slow-store window and one TTL after it, no runner of a slowed
// replica stops at its deadline while every store call that replica made
// since its last confirmed renewal answered within the call timeout
// (renewals starved by a slow store); and, with a pool, no stretch longer
// than the takeover bound plus three renewal periods (twice the orphan
// delay) passes without an instant at which every pool key runs, outside
// each fault that stops work (a kill, a freeze, a network fault, a second
// process under one owner name, a store restart) and that bound after it;
// the report says how much of the run that left to check; and a replica
// whose log is stalled goes on with its rounds once the store answers it
// again: no more than TTL + slack between its store calls other than
// renewals (the engine writes log records from a queue of its own). The
// [Report] adds takeover latencies, time without a holder, the longest gap between renewals
// under a slow store, whether same-owner pairs shared an owner id, what
// wrapper freezes did (children stopped by their guard while frozen, how
// long after the deadline their work stopped and their process was gone,
// takeovers meanwhile), and step-downs no fault explains. [WriteTimeline]
// draws the history as SVG: frozen stretches hatched, stalled logs dotted,
// child work outlined with dashes and its wrapper's freeze as a strip at
// its foot, the guard's deadline as a tick, faults on a row of their own.
//
// # Using it from a command
//
// `tenure verify` is Run plus a hidden subcommand that is the replica:
//
//	// tenure __chaos-replica (hidden): the process Run starts.
//	os.Exit(chaos.ReplicaMain())
//
//	// tenure verify --store URL --duration 2m --seed N --replicas 3 --keys 4 --faults KIND,… --timeline FILE
//	rep, err := chaos.Run(ctx, chaos.Options{
//		Store: url, Duration: d, Seed: seed, Replicas: n, Keys: k,
//		Faults:      kinds,                       // nil: every kind but store-restart
//		ReplicaArgs: []string{"__chaos-replica"}, // Executable defaults to os.Executable()
//		Logger:      logger,                      // progress: one line per fault
//	})
//	if err != nil { … }                           // the run could not be carried out
//	rep.WriteText(os.Stdout)
//	chaos.WriteTimeline(file, rep.History)        // --timeline
//	if !rep.OK() { … exit 1 }                     // rep.HistoryDir keeps the evidence
//
// A saved history can be checked again offline: Check(LoadHistory(dir)).
//
// # Running it
//
// The package tests run a short schedule on each store (TestChaosSQLite,
// TestChaosPostgres, TestChaosMySQL, TestChaosRedis, TestChaosEtcd). A
// long run:
//
//	TENURE_CHAOS_DURATION=10m go test ./internal/harness/chaos -run TestChaosPostgres -v -timeout 30m
//
// TENURE_CHAOS_SEED=N replays a seed and TENURE_CHAOS_FAULTS=freeze-wrapper,kill
// picks the kinds; a failed run keeps its history directory (logs,
// schedule, report, timeline) and names it in the report.
package chaos
