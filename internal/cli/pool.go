package cli

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
)

type poolFlags struct {
	replicaFlags
	name                    string
	keys, keysFile, keysCmd string
	max                     int
	weight                  float64
	refresh, keysTimeout    time.Duration
}

func (e *env) poolCommand() *cobra.Command {
	var f poolFlags
	cmd := &cobra.Command{
		Use:   "pool (--keys K1,K2 | --keys-file FILE | --keys-cmd CMD) [flags] -- COMMAND [ARGS...]",
		Short: "Share a set of keys across replicas: one command per key, each on one replica",
		Long: `Share a set of keys (accounts, tenants, shards) across every replica that runs
the same pool, and run COMMAND once per key this replica holds, with {key} in
COMMAND and its arguments replaced by the key. Start the same line on every
replica: each key runs on exactly one of them, and the keys are spread fairly
(by --weight) and moved as replicas join and leave.

The keys come from exactly one of:
  --keys a,b,c          a fixed list
  --keys-file FILE      one key per line (blank lines and # comments skipped);
                        read again when it changes, checked every --refresh
  --keys-cmd 'CMD'      run with sh -c every --refresh; one key per line of
                        its output. A run that fails, or has not finished
                        within --keys-timeout (its whole process group is
                        then killed), is logged and keeps the previous keys.
A key listed twice counts once.
A key that leaves the set has its command stopped and its lease released.
The keys must be readable at start, or tenure exits with status 2. SIGHUP
reads them again at once, and with --pass-sighup is passed on to every
running command; as with tenure run, it never stops or hands over.

Each command runs as with tenure run: in its own process group, with
TENURE_KEY, TENURE_EPOCH, TENURE_OWNER and TENURE_FENCE_KEY (the key's
lease key: fence writes with it, never with TENURE_KEY, which another pool
over the same keys shares), and TENURE_STORE without its credentials, in
its environment (--keys-cmd gets the same, without the
lease's variables), output to
tenure's, input from /dev/null; SIGTERM to the group when the key is lost or
handed over, SIGKILL after --stop-timeout; and a guard that kills every
group at once if tenure itself dies, and stops each at its lease's safety
deadline if tenure is frozen. A command that exits while its key is
held is restarted with exponential backoff (from ttl/3 up to 16×ttl/3).

Key K of the pool is leased as ~pool/NAME/K, so pools with other names, and
tenure run, may use the same key names without sharing a lease.
Each replica holds a membership lease, ~workers/NAME/OWNER@WEIGHT, or
OWNER@WEIGHT,max=M with --max M, which tenure status lists under POOL and
WORKER. Replicas may set different --weight and --max: each reads the
others' from their memberships. Versions before this one neither publish
their --max nor read another's, and ignore a membership that has one: while
an upgrade mixes versions, replicas with --max balance unevenly (they may
hand keys back and forth), until every replica runs this version. Each key
prefers one replica (by hashing). A replica waits one renewal round (ttl/3) after joining, so that
replicas started together see each other, then claims the keys it prefers,
up to a little above its fair share, and after about ttl/2 other keys left
without a holder. It sheds keys above its share at once, and hands a few
keys a round over to a replica under its share only after holding them for
30s, so that no key bounces.

SIGINT or SIGTERM drains the replica: its membership is marked draining,
every command is stopped, every lease released, and peers pick the keys up
at once; then tenure exits 0. A second signal, a second or more after the
first, skips the rest of --stop-timeout and kills the commands.

Timing is that of tenure run: a crashed replica's keys run again elsewhere
no sooner than ttl + grace after its last renewal, and a few seconds later
at most; --stop-timeout must be shorter than --renew-every (ttl/3) + grace.

` + exitCodesHelp,
		Example: `  # one IMAP sync per mailbox, spread over every replica
  tenure pool --name mail --keys-file /etc/app/mailboxes --store postgres://tenure@db/ops \
    -- ./imap-sync --mailbox {key}

  # one consumer per tenant, the tenant list from the database, re-read every minute
  tenure pool --name tenants --refresh 1m \
    --keys-cmd 'psql -Atc "select id from tenants where active" app' -- ./consume {key}

  # a fixed set of shards; this bigger replica takes twice the share, at most 8
  tenure pool --keys shard-0,shard-1,shard-2,shard-3 --weight 2 --max 8 -- ./shard-worker {key}

  # status of the pool on http://127.0.0.1:9090/status (pools, keys, leases)
  tenure pool --keys a,b,c --http 127.0.0.1:9090 -- sh -c 'exec ./work "$TENURE_KEY"'`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.pool(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "pool", "the pool's name, the same on every replica (letters, digits, underscore)")
	fl.StringVar(&f.keys, "keys", "", "the keys, separated by commas")
	fl.StringVar(&f.keysFile, "keys-file", "", "a file of keys, one a line")
	fl.StringVar(&f.keysCmd, "keys-cmd", "", "a shell command that prints the keys, one a line")
	fl.IntVar(&f.max, "max", 0, "hold at most this many keys (0: no limit beyond the fair share)")
	fl.Float64Var(&f.weight, "weight", 1, "this replica's share relative to the others'")
	fl.DurationVar(&f.refresh, "refresh", 30*time.Second, "how often the keys are read again from --keys-file or --keys-cmd")
	fl.DurationVar(&f.keysTimeout, "keys-timeout", 10*time.Second, "how long one read of the keys may take (--keys-cmd is killed then)")
	addReplicaFlags(cmd, &f.replicaFlags)
	return cmd
}

func (e *env) pool(cmd *cobra.Command, f poolFlags, args []string) error {
	if err := checkCommandArgs(cmd, args, "tenure pool --keys a,b,c"); err != nil {
		return err
	}
	if err := store.ValidateName("pool name (--name)", f.name); err != nil {
		return withCode(ExitUsage, err)
	}
	switch {
	case f.max < 0:
		return usagef("--max %d: want 0 (no limit) or more", f.max)
	case !(f.weight > 0) || math.IsInf(f.weight, 1):
		return usagef("--weight %v: want a finite positive number", f.weight)
	case f.refresh <= 0:
		return usagef("--refresh %v: want a positive duration", f.refresh)
	case f.keysTimeout <= 0:
		return usagef("--keys-timeout %v: want a positive duration", f.keysTimeout)
	}
	rep, err := e.prepare(cmd, f.replicaFlags, args, true)
	if err != nil {
		return err
	}
	src, err := keySource(cmd, f, rep.runner.env)
	if err != nil {
		return err
	}
	// Read the keys once now: a source that does not work at start is a
	// mistake to report, not to retry quietly every --refresh.
	readCtx, cancel := context.WithTimeoutCause(cmd.Context(), f.keysTimeout, fmt.Errorf("--keys-timeout %v passed", f.keysTimeout))
	keys, err := src.Keys(readCtx)
	cancel()
	if err != nil {
		return withCode(ExitUsage, fmt.Errorf("reading the pool's keys: %w", err))
	}
	if len(keys) == 0 {
		rep.log.Warn("the pool has no keys yet; waiting for some", "pool", f.name)
	}
	pool := tenure.Pool{
		Name: f.name, Source: primed(src, keys), Runner: rep.runner,
		RefreshEvery: f.refresh, SourceTimeout: f.keysTimeout, Weight: f.weight, MaxKeys: f.max,
	}
	rep.setup = func(sup *tenure.Supervisor) error { return sup.AddPool(pool) }
	rep.hangup = func(sup *tenure.Supervisor) {
		_ = sup.RefreshPool(f.name) // the pool was added: it cannot be unknown
		if !f.passSighup {
			rep.log.Info("SIGHUP: reading the pool's keys again", "pool", f.name)
			return
		}
		n := rep.runner.reload()
		rep.log.Info("SIGHUP: reading the pool's keys again and passing it on to the commands", "pool", f.name, "commands", n)
	}
	rep.announce = func(sup *tenure.Supervisor) {
		rep.log.Info("joining the pool", "pool", f.name, "keys", len(keys), "store", rep.spec.Shown,
			"owner", sup.Owner(), "weight", f.weight, "ttl", f.ttl, "grace", f.grace)
	}
	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	_, err = e.serve(ctx, stop, rep)
	return err
}

// keySource builds the source that exactly one of --keys, --keys-file and
// --keys-cmd names; --keys-cmd runs with env, as the pool's commands do.
func keySource(cmd *cobra.Command, f poolFlags, env []string) (tenure.KeySource, error) {
	var given []string
	for _, name := range []string{"keys", "keys-file", "keys-cmd"} {
		if cmd.Flags().Changed(name) {
			given = append(given, "--"+name)
		}
	}
	if len(given) != 1 {
		return nil, usagef("give exactly one of --keys, --keys-file and --keys-cmd (got %d%s)", len(given), listed(given))
	}
	switch {
	case cmd.Flags().Changed("keys-file"):
		if f.keysFile == "" {
			return nil, usagef("--keys-file: empty path")
		}
		return tenure.KeysFromFile(f.keysFile), nil
	case cmd.Flags().Changed("keys-cmd"):
		if strings.TrimSpace(f.keysCmd) == "" {
			return nil, usagef("--keys-cmd: empty command")
		}
		return tenure.KeysFromCmd(func(ctx context.Context) *exec.Cmd {
			c := exec.CommandContext(ctx, "sh", "-c", f.keysCmd)
			c.Env = env
			return c
		}), nil
	}
	keys, err := splitKeys(f.keys)
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("--keys: %w", err))
	}
	if len(keys) == 0 {
		// A fixed list never grows: an empty one would wait forever.
		return nil, usagef("--keys %q names no key: give them separated by commas, as in --keys a,b,c", f.keys)
	}
	return tenure.StaticKeys(keys...), nil
}

func listed(flags []string) string {
	if len(flags) == 0 {
		return ""
	}
	return ": " + strings.Join(flags, ", ")
}

// splitKeys splits a comma-separated list, dropping blanks and repeats.
func splitKeys(list string) ([]string, error) {
	var keys []string
	seen := make(map[string]bool)
	for k := range strings.SplitSeq(list, ",") {
		k = strings.TrimSpace(k)
		if k == "" || seen[k] {
			continue
		}
		if err := store.ValidateKey(k); err != nil {
			return nil, err
		}
		seen[k] = true
		keys = append(keys, k)
	}
	return keys, nil
}

// primed answers the first read with keys already read, so a --keys-cmd
// is not run twice at start, and reads src from then on.
func primed(src tenure.KeySource, keys []string) tenure.KeySource {
	var used atomic.Bool
	return tenure.KeySourceFunc(func(ctx context.Context) ([]string, error) {
		if used.CompareAndSwap(false, true) {
			return keys, nil
		}
		return src.Keys(ctx)
	})
}
