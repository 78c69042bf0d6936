// Package tenure runs each named piece of work on exactly one replica of a
// service at a time, and hands it over fast and safely when that replica
// stops, crashes, pauses or loses its database.
//
// A [Supervisor] holds a lease per key in a [store.Store] (SQLite,
// PostgreSQL, Redis, …) and runs the key's [Runner] while, and only while,
// it holds that lease:
//
//	sup, err := tenure.New(tenure.Config{Store: st}) // a store means leases
//	sup.Set("telegram-poller", tenure.Job{Runner: tenure.RunnerFunc(poll)})
//	err = sup.Run(ctx) // blocks; cancel ctx to hand everything over
//
// # Guarantees
//
//   - At most one holder per key, decided by the store on the store's clock.
//   - Fencing: every term of a key has an epoch greater than every earlier
//     one, even after tenure prune deleted the key's old record (the
//     store keeps an epoch floor); the runner receives it in [Lease] and
//     can pass it to the fence package so a downstream database rejects
//     writes from a stale term.
//   - Fail closed: a runner's context is cancelled before any peer may take
//     its key, whether or not the store answers (the timing rule below).
//     The cancellation comes from a watchdog timer, shared by the runners
//     and fired for each at its own deadline, that takes no lock of the
//     supervisor and waits for no store call and no supervision round
//     first, and logs only once every runner due has been cancelled: a
//     blocked log handler (a full stderr pipe, a stuck shipper), a slow
//     store or a busy loop cannot delay it. Work the
//     supervisor cannot cancel itself (a child process) gets the deadline
//     through [Lease.StopAt]; `tenure run` hands it to a guard process that
//     stops the command on its own when tenure is frozen.
//   - A blocked log costs log lines, never work: while [Supervisor.Run]
//     runs, records wait in a bounded queue written by a goroutine of
//     their own, so the loops that renew leases and start work never wait
//     for Config.Logger's handler. When the queue is full, records are
//     dropped, counted ([Observer].LogRecordsDropped) and reported once
//     the handler takes records again.
//   - One owner id per start: the store sees Config.Owner plus an
//     incarnation drawn by [New], so replicas given one name (a hostname
//     shared by containers, a copied unit file) never take a key from each
//     other. A lease lost to a process of the same name is logged as an
//     error.
//   - Three renewal outcomes: renewed; lost (the store refused: the runner
//     stops at once and the lease is never released by this replica);
//     unconfirmed (an error or timeout: the deadline keeps running).
//   - Graceful handoff: on shutdown, removal or disabling, the runner is
//     stopped first and the lease released only after it has returned; a
//     released lease can be taken at once. Renewals go on while runners
//     wind down; a runner that does not return within StopTimeout keeps
//     the lease (left to expire on shutdown).
//   - Nothing starts on a non-holder: every path that starts a runner
//     checks the lease under the supervisor's lock first.
//   - A misconfigured replica fails where it is seen: when the store
//     refuses every call for good for Config.MaxRefused rounds (no rights, no
//     table it may create, a read-only store), Run stops and returns
//     [ErrStoreRefused] instead of retrying forever.
//
// # Timing rule
//
// Let t be the local send time of the last confirmed grant or renewal of a
// lease. The store stamps its expiry no earlier than t + TTL, and a peer
// may take it no earlier than expiry + Grace on the store's clock. The
// holder treats the lease as held only while now + RenewEvery < t + TTL, so
// its runner is cancelled at least RenewEvery + Grace before a peer can
// start. A store may date a grant earlier than its send (etcd, whose
// session its last keep-alive found alive that long before, and is spared
// another): t is then that earlier moment, at most TTL - 2·RenewEvery -
// CallTimeout back, so the first renewal still lands in time. Only the
// local monotonic clock is read — one that counts the time
// the host spends suspended (CLOCK_BOOTTIME on Linux), so a machine or VM
// resumed after its deadline passed stops its runners at once — and clocks
// of different hosts are never compared. Every store call is bounded by
// CallTimeout (≤ RenewEvery/2), and a call that times out is unconfirmed.
// Renewals run on a schedule of their own, never queued behind
// acquisitions or reads of the lease table; an unconfirmed renewal is
// retried once at once.
//
// # Pools and namespaces
//
// A [Pool]'s key K is leased as Config.Prefix + "~pool/" + name + "/" + K,
// and each worker holds a membership lease under Config.Prefix +
// "~workers/" + name, so pools with other names, and singletons, may use
// the same key names without ever sharing a lease. Config.Prefix is the
// supervisor's namespace: Set refuses keys outside it.
//
// A pool worker's reads of the lease table grow with the workers and the
// keys that change, not with the pool's keys, when its store pushes
// events (PostgreSQL, Redis, etcd, SQLite, memory) and its namespace
// holds nothing live but pools: it keeps its view of the keys from the
// pushed acquisitions and releases, reads only the memberships each round
// (a holder's live membership vouches for its keys, renewed in the same
// call), and reads the whole table every Config.FullReadEvery, when a
// member leaves or dies, when its subscription breaks, and when the store
// says it dropped events. A pool key revoked without an event, or one
// whose release failed (it expires while its holder lives), can therefore
// stay unclaimed until the next whole read, and a peer's pool key shows in
// Status whether its runner runs as of that read. The view only steers
// claims: the store arbitrates each one. On MySQL, beside a
// singleton, or in a namespace shared with live singletons, every round
// reads the whole table: give large pools a Prefix of their own.
//
// # State of a key on one replica
//
//	         acquire ok                 renewals confirmed
//	waiting ───────────▶ holding ───────────────────────────┐
//	  ▲  ▲                 │ │ │                             │
//	  │  │ store refused   │ │ └─ deadline near, no reply ──▶ stopped, lease kept
//	  │  └─────────────────┘ │     (renewals go on; a confirmed one resumes)
//	  │    (runner cancelled)│
//	  └── released ◀─────────┘ removed / disabled / shutdown:
//	                           runner returned, then release
//
// While the lease is held, the key's runner goes idle → starting (reload,
// then a last check of the lease under the supervisor's lock) → running →
// stopping (cancelled, not yet returned) → idle, and a lease no longer
// wanted is handed back (releasing) only from idle; a new start waits for
// idle too. What the operator wants of the key — configured, disabled,
// finished (its runner returned ErrDone), paused (Pause: a record in the
// store stops the key on every replica until Resume), moved (Move: a record
// keeps the holder out and may reserve the key for a named replica),
// cooling (its runner failed
// Config.MaxFailures times within FailureWindow, so the key was handed to
// a peer for Cooldown), removed — decides which way it goes.
//
// # What Tenure does not promise
//
//   - It cannot stop a runner that ignores its context. The lease is then
//     kept (renewed while the supervisor runs, left to expire on shutdown),
//     but work past the deadline can overlap a peer's: use fencing.
//   - Pauses longer than the margin (a process frozen between checking its
//     lease and writing) are caught only by fencing, never by timing alone.
//   - A store that loses acknowledged writes. A failover may promote a
//     replica that lacks the primary's last writes: measured, an
//     asynchronous PostgreSQL standby lost up to 40 commits (21 ms) in 20
//     of 20 failovers over a 5 ms link, a Redis replica up to 58 writes
//     (5 ms); a synchronous standby lost none. The PostgreSQL and Redis
//     stores notice the promotion (a new timeline; a new replication id)
//     and grant no term for TTL + grace after it, so a holder whose term
//     was lost stops first, and epochs rise above every lost one. etcd
//     loses no acknowledged write: a three-member cluster kept every
//     guarantee through 82 member kills, leaders included. Not covered:
//     MySQL replication, a Redis that lost everything (no persistence),
//     and processes of an older version sharing the store. SAFETY.md's
//     "Replicated stores" has the figures and the settings to choose.
//   - A step of the store host's wall clock. PostgreSQL, MySQL, Redis and
//     SQLite stamp expiries with the wall clock of the host they run on
//     (the holder measures its own deadline on its monotonic clock). A step
//     forward by D makes every live lease expire D early, so a peer may
//     start D sooner than the holder expects: steps up to the margin
//     RenewEvery + Grace (10 s with the defaults) are absorbed, larger ones
//     are caught only by fencing. A step backward makes leases live longer:
//     a crashed holder's keys are taken over later, nothing overlaps. etcd
//     times leases on its leader's monotonic clock and is not affected.
//     Keep NTP slewing, not stepping, on store hosts; SAFETY.md has the
//     arithmetic.
package tenure
