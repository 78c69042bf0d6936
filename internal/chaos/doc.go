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
//     writes to a resource guarded by the fence package with its epoch. The
//     think time deliberately ignores cancellation, like a process frozen
//     between deciding to write and writing: the fence, not the lease
//     timing, must order those writes.
//
// Every store call goes through a recorder that logs its send time and
// outcome. Each record is one write(2) to an O_APPEND file, so a replica
// killed with SIGKILL leaves a log complete up to its last record.
//
// # The faults
//
// One at a time, from a schedule drawn from the seed (math/rand/v2): kill
// -9 of a holder and a replacement started; SIGSTOP/SIGCONT of a holder for
// 0.5–4×TTL; the store unreachable from one replica or all of them for
// 1–3×TTL; replies held back while requests still commit; added latency;
// a graceful restart (SIGTERM). PostgreSQL and Redis are reached through an
// in-process TCP proxy per replica; SQLite has no network, so the same
// faults are emulated inside the replica's store recorder, driven by a
// control file the harness writes. The fault kinds and their parameters
// replay exactly from a seed; which process holds which key at each moment
// does not, since it depends on the operating system's scheduling.
//
// # The checks
//
// [Check] reads a [History] (all logs merged on the shared clock) and
// reports, per invariant: no two replicas' work on a key overlaps (a frozen
// process's interval is suspended while it is stopped, and it must stop
// promptly once it resumes; a killed process's work ends at the moment it
// died); fenced writes are accepted in non-decreasing epoch order and a
// stale one is always refused; no epoch is issued twice; no term is granted
// before its predecessor's expiry + grace (measured from its last confirmed
// renewal); a crashed holder is replaced within TTL + grace + one renewal
// interval + slack; and a runner stopped for lack of renewals stops at
// least RenewEvery + Grace before a peer starts. The [Report] adds
// takeover latencies, time without a holder, and step-downs no fault
// explains. [WriteTimeline] draws the history as SVG.
//
// # Using it from a command
//
// `tenure verify` is Run plus a hidden subcommand that is the replica:
//
//	// tenure __chaos-replica (hidden): the process Run starts.
//	os.Exit(chaos.ReplicaMain())
//
//	// tenure verify --store URL --duration 2m --seed N --replicas 3 --keys 4 --timeline FILE
//	rep, err := chaos.Run(ctx, chaos.Options{
//		Store: url, Duration: d, Seed: seed, Replicas: n, Keys: k,
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
// The package tests run a short schedule on each store. A long run:
//
//	TENURE_CHAOS_DURATION=10m go test ./internal/chaos -run TestChaosPostgres -v -timeout 30m
//
// TENURE_CHAOS_SEED=N replays a seed; a failed run keeps its history
// directory (logs, schedule, report, timeline) and names it in the report.
package chaos
