package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/store"
)

// minPruneAge is the youngest record prune may delete. A record that
// expired less than its grace ago still protects a holder that may be
// running (a frozen process, a slow clock), and graces are seconds; an
// hour also keeps recent history in tenure status.
const minPruneAge = time.Hour

func (e *env) pruneCommand() *cobra.Command {
	var (
		olderThan time.Duration
		prefix    string
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "prune [--older-than 24h] [--prefix P] [--store URL]",
		Short: "Delete lease records whose term ended long ago",
		Long: `Delete the records of keys whose last term ended (released, expired or
revoked) at least --older-than ago, on the store's clock. Live leases, pause
records and the records of schedule periods still running are never
touched. A table grows by one record per key ever used — a scheduled job
writes one per period, a pool one per key it ever had — so run prune now and
then (a daily cron job, say).

Epochs never repeat: before a record goes, the store raises its epoch floor
above it, and a key acquired again later starts above every epoch it had, so
fencing tokens stay monotonic. Records are deleted in batches of about a
thousand, each in a short transaction, so renewals are never held up for
long. On etcd a record is deleted by the first prune that runs at least
--older-than (less a minute) after one that found it dead: etcd dates only
leases, and a leader change restarts the count.

Run prune only once every replica runs a Tenure that knows the epoch floor
(this version or later): an older replica would start a pruned key at epoch
1 again.

--older-than must be at least 1h and longer than every --grace in use.
prune looks before it writes: like status, it never creates a store, and a
URL that names none is an error (exit 3).

` + exitCodesHelp,
		Example: `  tenure prune --store postgres://admin@db/ops
  tenure prune --older-than 168h --prefix nightly-report~done/ --store sqlite:/var/lib/app/tenure.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < minPruneAge {
				return usagef("--older-than %v is under %v: a record that young may still be in its grace, protecting a holder", olderThan, minPruneAge)
			}
			if timeout <= 0 {
				return usagef("--timeout %v must be positive", timeout)
			}
			// Opened read-only first, which fails when the URL names no
			// store, so a wrong URL creates nothing.
			err := e.withStore(cmd, storeurl.OpenReadOnly, func(context.Context, storeurl.Spec, storeurl.Store) error { return nil })
			if err != nil {
				return err
			}
			return e.withStoreFor(cmd, timeout, storeurl.OpenSpec, func(ctx context.Context, spec storeurl.Spec, st storeurl.Store) error {
				p, ok := st.(store.Pruner)
				if !ok {
					return fmt.Errorf("the %s store cannot prune", spec.Kind)
				}
				n, err := p.Prune(ctx, prefix, olderThan)
				if err != nil {
					return fmt.Errorf("pruned %d records, then: %w", n, err)
				}
				what := "every key"
				if prefix != "" {
					what = fmt.Sprintf("keys starting with %s", printable(prefix))
				}
				records := "records"
				if n == 1 {
					records = "record"
				}
				fmt.Fprintf(e.stdout, "pruned %d %s of %s ended over %v ago from %s\n", n, records, what, olderThan, spec.Shown)
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 24*time.Hour, "delete records whose term ended at least this long ago (at least 1h)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys starting with this prefix")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long (what was deleted stays deleted)")
	addStoreFlag(cmd)
	return cmd
}
