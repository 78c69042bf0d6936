package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure/internal/chaos"
	"github.com/tenure-dev/tenure/internal/storeurl"
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
		timeline, history string
	)
	cmd := &cobra.Command{
		Use:   "verify [--store URL] [--duration 2m] [--seed N] [--replicas 3] [--keys 4] [--timeline FILE]",
		Short: "Prove the guarantees on your store under injected faults",
		Long: `verify runs several tenure replicas as separate processes against the store,
on scratch keys in a table (namespace) of their own that is dropped at the
end (it writes, like run: an SQLite file that does not exist is created), while it kills holders with SIGKILL, freezes them with SIGSTOP, cuts
them off from the store, holds replies back and adds latency — one fault at
a time, on a schedule drawn from the seed. Every replica logs its work and
its fenced writes; afterwards verify checks that no two replicas' work on a
key overlapped, that fenced writes were accepted in epoch order and every
stale one refused, that no epoch was issued twice, that no key was taken
before the last holder's expiry + grace, and that crashed holders were
replaced in time. It prints a report with takeover latencies against their
bound.

Supported stores: sqlite:, postgres://, redis://. The same --seed replays
the same fault schedule. A failed run keeps its history (named in the
report) so it can be studied and replayed.

Exit codes: 0 every invariant held; 4 an invariant was violated; 1 the run
could not be carried out; 2 usage error.`,
		Example: `  tenure verify --store postgres://tenure@db/ops --duration 5m
  tenure verify --store redis://cache:6379/0 --seed 42 --timeline run.svg
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
			spec, err := parseStore(raw)
			if err != nil {
				return err
			}
			switch {
			case spec.Kind != storeurl.SQLite && spec.Kind != storeurl.Postgres && spec.Kind != storeurl.Redis:
				return withCode(ExitUsage, fmt.Errorf("verify supports sqlite:, postgres:// and redis:// stores, not %s", spec.Kind))
			case duration < 10*time.Second:
				return withCode(ExitUsage, fmt.Errorf("--duration %v: at least 10s, for a few faults to happen", duration))
			case replicas < 2 || replicas > 16:
				return withCode(ExitUsage, fmt.Errorf("--replicas %d: between 2 and 16", replicas))
			case keys < 1 || keys > 64:
				return withCode(ExitUsage, fmt.Errorf("--keys %d: between 1 and 64", keys))
			}
			secrets := spec.Secrets
			logger, err := e.logger(cmd, secrets)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "verifying %s for %v with %d replicas on %d keys…\n", spec.Shown, duration, replicas, keys)
			rep, err := chaos.Run(cmd.Context(), chaos.Options{
				Store: raw, Duration: duration, Seed: seed, Replicas: replicas, Keys: keys,
				ReplicaArgs: []string{replicaCommand}, HistoryDir: history, Logger: logger,
			})
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
	f.StringVar(&timeline, "timeline", "", "write an SVG timeline of the run to FILE")
	f.StringVar(&history, "history", "", "keep the run's history (logs, schedule) in DIR")
	return cmd
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
