// Package tenure runs each named piece of work on exactly one replica of a
// service at a time, and hands it over fast and safely when that replica
// stops, crashes, pauses or loses its database.
//
// A [Supervisor] holds a lease per key in a [store.Store] (SQLite,
// PostgreSQL, Redis, …) and runs the key's [Runner] while, and only while,
// it holds that lease:
//
//	sup, err := tenure.New(tenure.Config{Store: st, Leases: tenure.LeasesOn})
//	sup.Set("telegram-poller", tenure.Job{Runner: tenure.RunnerFunc(poll)})
//	err = sup.Run(ctx) // blocks; cancel ctx to hand everything over
//
// # Guarantees
//
//   - At most one holder per key, decided by the store on the store's clock.
//   - Fencing: every term of a key has an epoch greater than every earlier
//     one; the runner receives it in [Lease] and can pass it to the fence
//     package so a downstream database rejects writes from a stale term.
//   - Fail closed: a runner's context is cancelled before any peer may take
//     its key, whether or not the store answers (the timing rule below).
//   - Three renewal outcomes: renewed; lost (the store refused: the runner
//     stops at once and the lease is never released by this replica);
//     unconfirmed (an error or timeout: the deadline keeps running).
//   - Graceful handoff: on shutdown, removal or disabling, the runner is
//     stopped first and the lease released only after it has returned; a
//     released lease can be taken at once. A runner that does not return
//     within StopTimeout keeps the lease (left to expire on shutdown).
//   - Nothing starts on a non-holder: every path that starts a runner
//     checks the lease under the supervisor's lock first.
//
// # Timing rule
//
// Let t be the local send time of the last confirmed grant or renewal of a
// lease. The store stamps its expiry no earlier than t + TTL, and a peer
// may take it no earlier than expiry + Grace on the store's clock. The
// holder treats the lease as held only while now + RenewEvery < t + TTL, so
// its runner is cancelled at least RenewEvery + Grace before a peer can
// start. Only the local monotonic clock is read; clocks of different hosts
// are never compared. Every store call is bounded by CallTimeout
// (≤ RenewEvery/2), and a call that times out is unconfirmed.
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
// # What Tenure does not promise
//
//   - It cannot stop a runner that ignores its context. The lease is then
//     kept (renewed while the supervisor runs, left to expire on shutdown),
//     but work past the deadline can overlap a peer's: use fencing.
//   - Pauses longer than the margin (a process frozen between checking its
//     lease and writing) are caught only by fencing, never by timing alone.
//   - A store that loses acknowledged writes (asynchronous replication
//     failover) can hand a key to two holders; fencing epochs still order
//     their writes where the store derives epochs from its clock (Redis).
package tenure
