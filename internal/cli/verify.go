package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/harness/chaos"
)

// replicaCommand is the name of the hidden subcommand that chaos.Run
// starts as each replica of tenure verify.
const replicaCommand = "__chaos-replica"

// ExitViolation is verify's exit code when an invariant was violated.
const ExitViolation = 4

func (e *env) verifyCommand() *cobra.Command {
	var (
		duration          time.Duration
		seed              uint64
		replicas, keys    int
		poolKeys          int
		timeline, history string
		faults            []string
		failoverCmd       string
	)
	cmd := &cobra.Command{
		Use:   "verify [--store URL] [--duration 2m] [--seed N] [--replicas 3] [--keys 4] [--pool-keys 8] [--faults KIND,…] [--timeline FILE] [--failover-cmd CMD]",
		Short: "Prove the guarantees on your store under injected faults",
		Long: `verify runs several tenure replicas as separate processes against the store,
on scratch keys in a table (namespace, prefix) of their own that is dropped
at the end (it writes, like run: an SQLite file that does not exist is
created); every other key's work runs as a child process through the guard
that run uses. The replicas also share --pool-keys keys in a pool, as pool
does (0: no pool). It injects faults one at a time, on a schedule drawn from
the seed; the first faults go through every kind once. Each replica reaches
a networked store through proxies of its own, where the network faults
happen (for SQLite and a Redis Sentinel URL, whose master's address comes
from the Sentinels at run time, they are played inside each replica's
store calls). The kinds (--faults):

  kill            SIGKILL a key's holder, start a replacement
  pause           SIGSTOP a holder for 0.5–4 TTL, then SIGCONT
  partition       cut one replica, or all, off from the store for 1–3 TTL
  hold-replies    requests reach the store and commit, replies are held back
  lose-replies    requests reach the store and commit, each reply is dropped
                  and its connection cut, for 0.1–0.75 TTL: the replica learns
                  of a failure at once and goes on from what it did
  latency         add one-way latency to the store
  restart         SIGTERM a holder (graceful handoff), start a replacement
  log-stall       block a holder's log output for 1–3 TTL (a full stderr
                  pipe, a stuck log shipper), mostly with a short partition
                  inside so it has a failed renewal to log; it must go on
                  renewing and starting work
  slow-store      every call of one replica, or all, answers 0.6–0.9 call
                  timeouts late, for 2–4 TTL
  same-owner      start an extra replica under a live holder's owner name
                  (a shared hostname, a copied unit file), stop it after
                  1.5–3 TTL
  freeze-wrapper  SIGSTOP a holder for 0.5–4 TTL while a key's work runs as
                  its child (through a guard, as run runs a command): the
                  guard alone must stop the child at the lease's deadline
  abandon         a holder of several keys (of one, if none holds more)
                  stops renewing one of them, without releasing it, and
                  stops claiming it, for 5–6 TTL (what an engine does with
                  a term it gave up on): the store must end that term on
                  its own while the holder's other terms live on
  store-restart   only with --failover-cmd: run CMD (with sh -c) to fail the
                  store over — kill its leader or primary, promote a
                  standby — with TENURE_FAULT_DOWN set to how long it
                  should stay down (0.25–2 TTL, in seconds); CMD returns once
                  the store serves again
  source-down     with a pool: restart a holder gracefully as a replica
                  that cannot read the pool's keys (a command missing from
                  a new image), and mend its source after 5–7 TTL: it must
                  take no share of keys it cannot run
  low-max         with a pool: restart a holder gracefully as a replica
                  that takes at most one of the pool's keys (--max 1)
                  among peers without a limit: they must take the rest,
                  with no key left to nobody

Every replica logs its work, its store calls and its fenced writes;
afterwards verify checks that no two replicas' work on a key overlapped,
that fenced writes were accepted in epoch order and every stale one
refused, that no epoch was issued twice, that no key was taken before the
last holder's expiry + grace, that a runner stopped for lack of renewals
(a frozen replica's child too, which only its guard can stop) stopped at
least renew-every + grace before a successor, that crashed holders were
replaced in time, that an abandoned term ended and a peer ran its key in
time, that a slow store which answered every call never
made a holder stop at its deadline, and that, outside faults that stop
work for a while, no stretch longer than the takeover bound plus 3
renewal periods passed without an instant at which every key of the pool
ran. It prints a report with
takeover latencies against their bound.

Supported stores: every one tenure runs on —
  sqlite:PATH                 fenced writes in an SQLite file beside the run
  postgres://, postgresql://  fenced writes in scratch tables of the database
  mysql://                    the same, on MySQL or MariaDB
  redis://, rediss://         fenced writes in an SQLite file beside the run
  etcd://, etcd+https://      fenced writes in scratch keys, refused by etcd
With --failover-cmd the fenced writes go to an SQLite file beside the run
whatever the store: a failover may lose the store's own acknowledged writes.
MySQL and Redis URLs must name one TCP host (no unix socket, no host list);
a PostgreSQL URL may list a primary and its standbys
(postgres://u@db1,db2/ops?target_session_attrs=read-write), an etcd URL
several endpoints. --failover-cmd then makes the store's own failover one
of the faults. The same --seed and
--faults replay the same fault schedule. A failed run keeps its history
(named in the report) so it can be studied and replayed.

Exit codes: 0 every invariant held; 4 an invariant was violated; 1 the run
could not be carried out; 2 usage error.`,
		Example: `  tenure verify --store postgres://tenure@db/ops --duration 5m
  tenure verify --store mysql://tenure@db:3306/ops --duration 10m
  tenure verify --store etcd://10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379
  tenure verify --store redis://cache:6379/0 --seed 42 --timeline run.svg
  tenure verify --store redis://cache:6379/0 --faults slow-store,kill --duration 1m
  tenure verify            # the default SQLite file, 2 minutes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, _ := cmd.Flags().GetString("store")
			if raw == "" {
				def, err := storeurl.DefaultURL()
				if err != nil {
					return withCode(ExitUsage, err)
				}
				raw = def
			}
			spec, err := e.parseStore(raw)
			if err != nil {
				return err
			}
			if err := chaos.CheckStore(raw); err != nil {
				return withCode(ExitUsage, scrubErr(err, spec.Secrets))
			}
			switch {
			case duration < 10*time.Second:
				return withCode(ExitUsage, fmt.Errorf("--duration %v: at least 10s, for a few faults to happen", duration))
			case replicas < 2 || replicas > 16:
				return withCode(ExitUsage, fmt.Errorf("--replicas %d: between 2 and 16", replicas))
			case keys < 1 || keys > 64:
				return withCode(ExitUsage, fmt.Errorf("--keys %d: between 1 and 64", keys))
			case poolKeys < 0 || poolKeys > 64:
				return withCode(ExitUsage, fmt.Errorf("--pool-keys %d: between 0 (no pool) and 64", poolKeys))
			}
			kinds := verifyFaults(failoverCmd != "", poolKeys > 0)
			for _, f := range faults {
				if f == chaos.FaultSourceDown && poolKeys == 0 {
					return withCode(ExitUsage, fmt.Errorf("--faults %s needs a pool: --pool-keys above 0", f))
				}
				if !slices.Contains(kinds, f) {
					return withCode(ExitUsage, fmt.Errorf("--faults: unknown fault kind %q (known: %s)", f, strings.Join(kinds, ",")))
				}
			}
			secrets := spec.Secrets
			logger, err := e.logger(cmd, secrets)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "verifying %s for %v with %d replicas on %d keys and %d pool keys…\n", spec.Shown, duration, replicas, keys, poolKeys)
			opts := chaos.Options{
				Store: raw, Duration: duration, Seed: seed, Replicas: replicas, Keys: keys, PoolKeys: poolKeys, Faults: faults,
				ReplicaArgs: []string{replicaCommand}, HistoryDir: history, Logger: logger,
			}
			if failoverCmd != "" {
				opts.RestartStore = failover(failoverCmd, logger)
			}
			rep, err := chaos.Run(cmd.Context(), opts)
			if err != nil {
				return withCode(ExitFailure, scrubErr(err, secrets))
			}
			if err := rep.WriteText(e.stdout); err != nil {
				return withCode(ExitFailure, err)
			}
			if timeline != "" {
				if err := writeTimeline(timeline, rep); err != nil {
					return withCode(ExitFailure, err)
				}
				fmt.Fprintf(e.stdout, "timeline   %s\n", timeline)
			}
			if !rep.OK() {
				return silentExit(ExitViolation)
			}
			return nil
		},
	}
	addStoreFlag(cmd)
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", 2*time.Minute, "how long to inject faults")
	f.Uint64Var(&seed, "seed", 0, "seed of the fault schedule (0: random, reported)")
	f.IntVar(&replicas, "replicas", 3, "replica processes running at once")
	f.IntVar(&keys, "keys", 4, "keys every replica wants")
	f.IntVar(&poolKeys, "pool-keys", 8, "keys the replicas share in a pool (0: no pool)")
	f.StringVar(&timeline, "timeline", "", "write an SVG timeline of the run to FILE")
	f.StringVar(&history, "history", "", "keep the run's history (logs, schedule) in DIR, a new or empty one")
	f.StringSliceVar(&faults, "faults", nil, "fault kinds to inject, comma-separated (default all: "+
		strings.Join(verifyFaults(false, true), ",")+", and store-restart with --failover-cmd; source-down and low-max only with a pool)")
	f.StringVar(&failoverCmd, "failover-cmd", "", "shell command that fails the store over (store-restart faults)")
	return cmd
}

// verifyFaults are the fault kinds verify can inject: restarting the
// store only when told how, a pool's source only with a pool.
func verifyFaults(canFailOver, pool bool) []string {
	return slices.DeleteFunc(slices.Clone(chaos.FaultKinds), func(k string) bool {
		return k == chaos.FaultStoreRestart && !canFailOver || (k == chaos.FaultSourceDown || k == chaos.FaultLowMax) && !pool
	})
}

// failoverTimeout bounds one run of --failover-cmd beyond its down time.
const failoverTimeout = 2 * time.Minute

// failover runs command for each store-restart fault, with how long the
// store should stay down in TENURE_FAULT_DOWN (seconds). Its output goes
// to the log, never to the report: it may name hosts and credentials.
func failover(command string, log *slog.Logger) func(ctx context.Context, down time.Duration) error {
	return func(ctx context.Context, down time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, down+failoverTimeout)
		defer cancel()
		c := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		c.Env = append(os.Environ(), fmt.Sprintf("TENURE_FAULT_DOWN=%.3f", down.Seconds()))
		out, err := c.CombinedOutput()
		if len(out) > 0 {
			log.Info("failover command output", "output", strings.TrimSpace(string(out)))
		}
		if err != nil {
			return fmt.Errorf("--failover-cmd: %w", err)
		}
		return nil
	}
}

func writeTimeline(path string, rep *chaos.Report) error {
	if rep.History == nil {
		return errors.New("no history to draw")
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chaos.WriteTimeline(f, rep.History); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
