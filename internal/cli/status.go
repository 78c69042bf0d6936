package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/leaseview"
	"github.com/tenure-dev/tenure/store"
)

// leaseView is one lease as status --json and /status show it.
type leaseView struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Epoch       int64  `json:"epoch"`
	Live        bool   `json:"live"`
	Released    bool   `json:"released"`
	Running     bool   `json:"running"`
	ExpiresInMs int64  `json:"expires_in_ms"`
}

func viewLeases(leases []store.Lease) []leaseView {
	out := make([]leaseView, 0, len(leases))
	for _, l := range leases {
		out = append(out, leaseView{
			Key: l.Key, Owner: l.Owner, Epoch: l.Epoch, Live: l.Live, Released: l.Released,
			Running: l.Running, ExpiresInMs: l.TimeLeft.Milliseconds(),
		})
	}
	return out
}

func timeLeft(l store.Lease) string {
	switch {
	case l.Released:
		return "-"
	case l.TimeLeft >= 0:
		return roundDur(l.TimeLeft)
	default:
		return "expired " + roundDur(-l.TimeLeft) + " ago"
	}
}

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// writeTable prints leases as an aligned table, and the pool workers'
// membership leases in a table of their own.
func writeTable(w io.Writer, leases []store.Lease) {
	if len(leases) == 0 {
		fmt.Fprintln(w, "no leases")
		return
	}
	v := leaseview.Classify(leases)
	if len(v.Keys) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tOWNER\tEPOCH\tSTATE\tRUNNING\tTIME LEFT")
		for _, l := range v.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", printable(l.Key), printable(orDash(l.Owner)), l.Epoch, leaseview.State(l), yesNo(l.Running), timeLeft(l))
		}
		tw.Flush()
	}
	if len(v.Paused) > 0 {
		if len(v.Keys) > 0 {
			fmt.Fprintln(w)
		}
		paused := make([]string, len(v.Paused))
		for i, k := range v.Paused {
			paused[i] = printable(k)
		}
		fmt.Fprintf(w, "paused (tenure resume --key KEY): %s\n", strings.Join(paused, ", "))
	}
	for _, m := range v.Moves {
		to := "any other replica"
		if m.To != "" {
			to = printable(m.To)
		}
		fmt.Fprintf(w, "moving %s from %s to %s (%s left)\n", printable(m.Key), printable(m.From), to, roundDur(m.Lease.TimeLeft))
	}
	if v.Done > 0 {
		fmt.Fprintf(w, "scheduled periods finished and still on record: %d\n", v.Done)
	}
	if len(v.Workers) == 0 {
		return
	}
	if len(v.Keys) > 0 {
		fmt.Fprintln(w)
	}
	// KEYS counts the worker's live leases of its pool in the listing.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tWORKER\tWEIGHT\tMAX\tSTATE\tKEYS\tTIME LEFT")
	for _, wk := range v.Workers {
		n, limit := "-", "-"
		if wk.Lease.Live {
			n = strconv.Itoa(wk.Held)
		}
		if wk.MaxKeys > 0 {
			limit = strconv.Itoa(wk.MaxKeys)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(wk.Prefix+wk.Pool), printable(orDash(wk.Lease.Owner)), strconv.FormatFloat(wk.Weight, 'g', -1, 64), limit, wk.State(), n, timeLeft(wk.Lease))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable quotes a key that would break the table (spaces, tabs).
func printable(s string) string {
	for _, r := range s {
		if r == ' ' || r == '\t' || r > 0x7e {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (e *env) statusCommand() *cobra.Command {
	var asJSON, watch, live bool
	var prefix string
	cmd := &cobra.Command{
		Use:   "status [--store URL] [--json] [--watch] [--live] [--prefix P]",
		Short: "Show every lease in the store",
		Long: `Show every lease in the store: its key, owner, epoch, state (held,
released, expired, or revoked by tenure release), whether the holder reported its command running, and
the time left before it expires (negative after expiry), all on the store's
clock.

status only reads: it never creates a store. A URL that names no store —
an SQLite file that does not exist, a database without the lease table —
is an error (exit 3), not an empty list, so that a mistyped path or table
is noticed. (SQLite may add its -wal and -shm files next to an existing
file, as any reader of it does.)

The members of tenure pool pools are listed apart, under POOL and WORKER:
their weight, MAX (the most keys the worker holds, its --max; - for no
limit), state (active, draining — stopping and handing its keys back
— or, once gone, released, expired or revoked) and KEYS, how many live
leases the worker's owner holds among those listed.

--json prints a JSON array of objects with the fields key, owner, epoch,
live, released, running and expires_in_ms, one per lease, pool memberships
(keys starting with ~workers/) included. The table starts with the store it
read, without its password; paused keys and moves under way (their records,
KEY~paused and KEY~move/HOLDER, are in --json as they are) follow it. --live leaves out released, expired and revoked
records. --watch redraws every second
until interrupted (with --json: one array per line).

` + exitCodesHelp,
		Example: `  tenure status
  tenure status --store sqlite:/var/lib/app/tenure.db --prefix nightly-
  tenure status --json | jq -r '.[] | select(.live) | .key + " " + .owner'
  tenure status --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, _ := cmd.Flags().GetString("store")
			spec, err := e.parseStore(raw)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if watch {
				var stop context.CancelFunc
				ctx, stop = signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
				defer stop()
			}
			openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			st, err := e.openStore(openCtx, spec, storeurl.OpenReadOnly)
			cancel()
			if err != nil {
				return err
			}
			defer st.Close()
			show := func() error {
				listCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				leases, err := st.List(listCtx, prefix)
				if err != nil {
					return withCode(ExitFailure, scrubErr(err, spec.Secrets))
				}
				if live {
					leases = slices.DeleteFunc(leases, func(l store.Lease) bool { return !l.Live })
				}
				if asJSON {
					return json.NewEncoder(e.stdout).Encode(viewLeases(leases))
				}
				if !watch {
					// Which store this is: several are easily confused,
					// and the default one is implicit. No password.
					fmt.Fprintf(e.stdout, "store %s\n\n", spec.Shown)
				}
				writeTable(e.stdout, leases)
				return nil
			}
			if !watch {
				return show()
			}
			return e.watchLoop(ctx, spec.Shown, asJSON, show)
		},
	}
	addStoreFlag(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every second until interrupted")
	cmd.Flags().StringVar(&prefix, "prefix", "", "show only keys that start with this prefix")
	cmd.Flags().BoolVar(&live, "live", false, "show only live leases: no released, expired or revoked records")
	return cmd
}

// watchLoop calls show every second until ctx ends. On a terminal it clears
// the screen first; otherwise each snapshot follows the last, with a
// timestamp line between tables.
func (e *env) watchLoop(ctx context.Context, shown string, asJSON bool, show func() error) error {
	tty := !asJSON && isTerminal(fileOf(e.stdout))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		switch {
		case tty:
			fmt.Fprintf(e.stdout, "\x1b[H\x1b[2J%s  %s  (Ctrl-C to stop)\n\n", time.Now().Format("15:04:05"), shown)
		case !asJSON:
			fmt.Fprintf(e.stdout, "--- %s\n", time.Now().Format(time.RFC3339))
		}
		if err := show(); err != nil {
			// A store hiccup should not end a watch; say so and go on.
			fmt.Fprintln(e.stderr, "tenure: "+oneLine(err.Error()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func fileOf(w io.Writer) *os.File {
	f, _ := w.(*os.File)
	return f
}
