package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
	"github.com/tenure-dev/tenure/store"
)

func (e *env) pauseCommand() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "pause --key KEY [--store URL]",
		Short: "Stop a key on every replica until it is resumed",
		Long: `Pause KEY cluster-wide. The pause is a record in the store (KEY~paused),
so it holds for every replica, those started later included: within one
renewal round (ttl/3) the holder stops its command gracefully and releases
the lease, and no replica starts the key again until tenure resume. A
replica about to start the key reads the record first, so none starts it
after the pause, even one that has not yet seen it in the table. Pausing a
paused key does nothing. tenure status lists paused keys. Singleton keys
only (tenure run); a pool's keys follow its key source.

` + exitCodesHelp,
		Example: `  tenure pause --key nightly-report
  tenure pause --key telegram-poller --store postgres://admin@db/ops`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPauseKey(key); err != nil {
				return err
			}
			return e.withStore(cmd, storeurl.OpenSpec, func(ctx context.Context, _ storeurl.Spec, st storeurl.Store) error {
				if err := tenure.Pause(ctx, st, key); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "paused %s: its holder stops it within a renewal round; tenure resume --key %s lets it run again\n", printable(key), printable(key))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the key to pause (required)")
	addStoreFlag(cmd)
	return cmd
}

func (e *env) resumeCommand() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "resume --key KEY [--store URL]",
		Short: "Let a paused key run again",
		Long: `Resume KEY after tenure pause: its pause record is released, and within one
renewal round a replica takes the key and starts its command. Resuming a
key that is not paused does nothing (exit 0).

` + exitCodesHelp,
		Example: `  tenure resume --key nightly-report`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPauseKey(key); err != nil {
				return err
			}
			return e.withStore(cmd, storeurl.OpenSpec, func(ctx context.Context, _ storeurl.Spec, st storeurl.Store) error {
				was, err := tenure.Resume(ctx, st, key)
				if err != nil {
					return err
				}
				if !was {
					fmt.Fprintf(e.stdout, "%s is not paused; nothing to resume\n", printable(key))
					return nil
				}
				fmt.Fprintf(e.stdout, "resumed %s: a replica takes it within a renewal round\n", printable(key))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the key to resume (required)")
	addStoreFlag(cmd)
	return cmd
}

func (e *env) moveCommand() *cobra.Command {
	var key, to string
	var d time.Duration
	cmd := &cobra.Command{
		Use:   "move --key KEY [--to OWNER] [--for DURATION] [--store URL]",
		Short: "Hand a key over from its holder to another replica",
		Long: `Move KEY away from the replica that holds it now. A move is a record in the
store (KEY~move/HOLDER) that lasts --for: within one renewal round (ttl/3)
the holder stops its command gracefully and releases the lease, and does
not ask for the key again while the move lasts. With --to, only the replica
named OWNER (its --owner name, or its whole owner id as tenure status shows
it) may take the key meanwhile; if it does not, the key waits until the move
ends, and then any replica may take it. Without --to, any other replica may.
Singleton keys only (tenure run).

` + exitCodesHelp,
		Example: `  tenure move --key telegram-poller
  tenure move --key telegram-poller --to web-2 --for 2m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkPauseKey(key); err != nil {
				return err
			}
			if d <= 0 {
				return usagef("--for %v: want a positive duration", d)
			}
			return e.withStore(cmd, storeurl.OpenSpec, func(ctx context.Context, _ storeurl.Spec, st storeurl.Store) error {
				from, err := tenure.Move(ctx, st, key, to, d)
				if err != nil {
					return err
				}
				target := "another replica"
				if to != "" {
					target = printable(to)
				}
				fmt.Fprintf(e.stdout, "moving %s from %s to %s: its holder stops it within a renewal round and stays out for %v\n",
					printable(key), printable(from), target, d)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the key to move (required)")
	cmd.Flags().StringVar(&to, "to", "", "the replica to move it to: an --owner name or an owner id (default: any other)")
	cmd.Flags().DurationVar(&d, "for", tenure.DefaultMoveFor, "how long the holder stays out and the key is reserved for --to")
	addStoreFlag(cmd)
	return cmd
}

func checkPauseKey(key string) error {
	if key == "" {
		return usagef("--key is required")
	}
	if err := store.ValidateKey(key); err != nil {
		return withCode(ExitUsage, err)
	}
	if _, isRecord := tenure.PausedKey(key); isRecord || strings.Contains(key, tenure.MoveInfix) {
		return usagef("--key %q is a pause or move record; give the key itself", key)
	}
	if poolkey.Reserved(key) {
		return usagef("--key %q is a pool's key or membership: only singleton keys (tenure run) can be paused", key)
	}
	return nil
}
