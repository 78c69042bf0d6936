package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/store"
)

// adminTimeout bounds an admin command's work on the store.
const adminTimeout = 30 * time.Second

// withStore parses --store, opens it with open for one admin command and
// closes it; the command has adminTimeout.
func (e *env) withStore(cmd *cobra.Command, open func(context.Context, storeurl.Spec) (storeurl.Store, error),
	fn func(ctx context.Context, spec storeurl.Spec, st storeurl.Store) error,
) error {
	return e.withStoreFor(cmd, adminTimeout, open, fn)
}

// withStoreFor is withStore with a timeout of the command's own.
func (e *env) withStoreFor(cmd *cobra.Command, timeout time.Duration, open func(context.Context, storeurl.Spec) (storeurl.Store, error),
	fn func(ctx context.Context, spec storeurl.Spec, st storeurl.Store) error,
) error {
	raw, _ := cmd.Flags().GetString("store")
	spec, err := e.parseStore(raw)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	st, err := e.openStore(ctx, spec, open)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := fn(ctx, spec, st); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return withCode(ExitFailure, scrubErr(err, spec.Secrets))
	}
	return nil
}

func (e *env) releaseCommand() *cobra.Command {
	var key string
	var yes bool
	cmd := &cobra.Command{
		Use:   "release --key KEY [--store URL] [--yes]",
		Short: "Revoke a key's lease, whoever holds it (admin)",
		Long: `Revoke the live lease on KEY, whoever holds it. The key moves to a new epoch
owned by nobody: the holder's next renewal is refused, so it stops its
command, and any write it still makes with the old epoch is rejected by
fenced stores. Peers may take the key only once the revoked term's expiry +
grace has passed, so there is still at most one holder even if the old one
never hears of the revocation.

On a terminal, tenure asks for confirmation; elsewhere --yes is required.
A key with no live lease is left alone (exit 0). release looks before it
writes, and only writes to revoke a live lease: like status, it never
creates a store, and a URL that names none is an error (exit 3).

` + exitCodesHelp,
		Example: `  tenure release --key nightly-report
  tenure release --key nightly-report --store postgres://admin@db/ops --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if key == "" {
				return usagef("--key is required")
			}
			if err := store.ValidateKey(key); err != nil {
				return withCode(ExitUsage, err)
			}
			if !yes && !isTerminal(e.stdin) {
				return usagef("refusing to revoke %q without confirmation: stdin is not a terminal; pass --yes", key)
			}
			// The lease is looked up in the store as it is, read-only, so a
			// wrong URL creates nothing; the store is opened to write only
			// to revoke a live lease, when it exists.
			return e.withStore(cmd, storeurl.OpenReadOnly, func(ctx context.Context, spec storeurl.Spec, st storeurl.Store) error {
				if _, ok := st.(store.Revoker); !ok {
					return withCode(ExitFailure, fmt.Errorf("the %s store cannot revoke leases", spec.Kind))
				}
				leases, err := st.List(ctx, key)
				if err != nil {
					return err
				}
				var cur *store.Lease
				for i := range leases {
					if leases[i].Key == key {
						cur = &leases[i]
					}
				}
				if cur == nil || !cur.Live {
					fmt.Fprintf(e.stdout, "%s has no live lease; nothing to release\n", printable(key))
					return nil
				}
				if !yes {
					fmt.Fprintf(e.stderr, "Revoke %s, held by %s (epoch %d, %s left)? Its command stops at the holder's next renewal. [y/N] ",
						printable(key), printable(cur.Owner), cur.Epoch, roundDur(cur.TimeLeft))
					answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
					if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
						fmt.Fprintln(e.stderr, "not revoked")
						return silentExit(ExitFailure)
					}
				}
				w, err := e.openStore(ctx, spec, storeurl.OpenSpec)
				if err != nil {
					return err
				}
				defer w.Close()
				revoked, err := w.(store.Revoker).Revoke(ctx, key)
				if err != nil {
					return err
				}
				if !revoked {
					fmt.Fprintf(e.stdout, "%s has no live lease; nothing to release\n", printable(key))
					return nil
				}
				fmt.Fprintf(e.stdout, "revoked %s (was held by %s, epoch %d); peers may take it after its expiry + grace\n",
					printable(key), printable(cur.Owner), cur.Epoch)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the key whose lease to revoke (required)")
	addStoreFlag(cmd)
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	return cmd
}

func (e *env) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate [--store URL]",
		Short: "Create the store's lease table if it does not exist",
		Long: `Create the store's schema (the lease table) if it does not exist. Stores also
do this on first use; run migrate with a privileged role when the
application's role may not create tables. Redis needs no schema.

` + exitCodesHelp,
		Example: `  tenure migrate --store postgres://admin@db/ops?table=tenure_leases
  tenure migrate --store sqlite:/var/lib/app/tenure.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withStore(cmd, storeurl.OpenSpec, func(ctx context.Context, spec storeurl.Spec, st storeurl.Store) error {
				m, ok := st.(store.Migrator)
				if !ok {
					fmt.Fprintf(e.stdout, "the %s store needs no migration\n", spec.Kind)
					return nil
				}
				if err := m.Migrate(ctx); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "migrated %s\n", spec.Shown)
				return nil
			})
		},
	}
	addStoreFlag(cmd)
	return cmd
}

func (e *env) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print tenure's version",
		Example: `  tenure version`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(e.stdout, versionString())
			return nil
		},
	}
}

// versionString is the main module's version as the build recorded it,
// with the VCS revision when the build had one.
func versionString() string {
	v, extra := "(unknown)", []string{runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		v = info.Main.Version
		var rev, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", modified"
				}
			}
		}
		if rev != "" {
			extra = append(extra, "revision "+rev[:min(12, len(rev))]+dirty)
		}
	}
	return fmt.Sprintf("tenure %s (%s)", v, strings.Join(extra, ", "))
}
