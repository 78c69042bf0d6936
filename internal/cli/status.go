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

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/engine/poolkey"
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

// state is the word shown for a lease: held, released, expired, or
// revoked (by tenure release: owned by nobody, blocked until its expiry +
// grace).
func state(l store.Lease) string {
	switch {
	case l.Live:
		return "held"
	case l.Released:
		return "released"
	case l.Owner == "" && l.Epoch > 0:
		return "revoked"
	default:
		return "expired"
	}
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
	var keys []store.Lease
	var workers []worker
	var paused, moving []string
	done := 0 // scheduled periods recorded as finished
	type poolOwner struct{ prefix, pool, owner string }
	held := make(map[poolOwner]int) // live keys of each worker in its pool
	for _, l := range leases {
		if k, ok := tenure.PausedKey(l.Key); ok {
			if l.Live {
				paused = append(paused, printable(k))
			}
			continue
		}
		if strings.Contains(l.Key, tenure.DoneInfix) || strings.Contains(l.Key, tenure.StartedInfix) {
			if l.Live && strings.Contains(l.Key, tenure.DoneInfix) {
				done++
			}
			continue // a schedule's bookkeeping, in --json as it is
		}
		if strings.Contains(l.Key, tenure.MoveInfix) {
			if m, ok := tenure.ParseMove(l); ok {
				to := "any other replica"
				if m.To != "" {
					to = printable(m.To)
				}
				moving = append(moving, fmt.Sprintf("%s from %s to %s (%s left)", printable(m.Key), printable(m.From), to, roundDur(l.TimeLeft)))
			}
			continue
		}
		if wk, ok := parseWorker(l); ok {
			workers = append(workers, wk)
			continue
		}
		keys = append(keys, l)
		if prefix, pool, _, ok := poolkey.ParseKey(l.Key); ok && l.Live {
			held[poolOwner{prefix, pool, l.Owner}]++
		}
	}
	if len(keys) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tOWNER\tEPOCH\tSTATE\tRUNNING\tTIME LEFT")
		for _, l := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", printable(l.Key), printable(orDash(l.Owner)), l.Epoch, state(l), yesNo(l.Running), timeLeft(l))
		}
		tw.Flush()
	}
	if len(paused) > 0 {
		if len(keys) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "paused (tenure resume --key KEY): %s\n", strings.Join(paused, ", "))
	}
	for _, m := range moving {
		fmt.Fprintf(w, "moving %s\n", m)
	}
	if done > 0 {
		fmt.Fprintf(w, "scheduled periods finished and still on record: %d\n", done)
	}
	if len(workers) == 0 {
		return
	}
	if len(keys) > 0 {
		fmt.Fprintln(w)
	}
	// KEYS counts the worker's live leases of its pool in the listing.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tWORKER\tWEIGHT\tSTATE\tKEYS\tTIME LEFT")
	for _, wk := range workers {
		st, n := state(wk.lease), "-"
		if wk.lease.Live {
			st, n = "active", strconv.Itoa(held[poolOwner{wk.m.Prefix, wk.m.Pool, wk.lease.Owner}])
			if !wk.lease.Running {
				st = "draining"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(wk.m.Prefix+wk.m.Pool), printable(orDash(wk.lease.Owner)), strconv.FormatFloat(wk.m.Weight, 'g', -1, 64), st, n, timeLeft(wk.lease))
	}
	tw.Flush()
}

// worker is a pool member's lease (see internal/engine/poolkey).
type worker struct {
	m     poolkey.Member
	lease store.Lease
}

// parseWorker recognises a membership lease. The owner shown is the
// lease's (empty once revoked); the pool and the weight come from the key.
// A membership with a malformed weight is listed as a plain key, as every
// worker ignores it.
func parseWorker(l store.Lease) (worker, bool) {
	m, err := poolkey.ParseMember(l.Key)
	if err != nil {
		return worker{}, false
	}
	return worker{m: m, lease: l}, true
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
their weight, state (active, draining — stopping and handing its keys back
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
