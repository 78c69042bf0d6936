// Package cli is the tenure command-line tool: run a command on one replica
// only, show and revoke leases, and demonstrate failover.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenure-dev/tenure/internal/cli/child"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/harness/chaos"
	"github.com/tenure-dev/tenure/store"
)

// Exit codes shared by every command.
const (
	ExitOK      = 0
	ExitFailure = 1 // a failure after start: a store error, a command that would not stop
	ExitUsage   = 2 // bad flags, URL, duration, key, or timing combination; pool keys unreadable at start
	ExitStore   = 3 // the store could not be reached or opened at start
	// ExitOnceTenure is run --once's code for every failure of Tenure's
	// own (what is otherwise 1, 2 or 3), so that a command's own 1–3,
	// passed through, is never mistaken for one; timeout(1) uses 125 so.
	ExitOnceTenure = 125
	ExitNoExec     = 126
	ExitNoFound    = 127
)

const exitCodesHelp = `Exit codes:
  0    success (run: stopped by SIGINT/SIGTERM after a clean handoff)
  1    failure after start (store error, command that would not stop)
  2    usage error: bad flag, URL, duration, key or timing combination, or
       (pool) keys that cannot be read at start
  3    store unreachable or unusable at start; for status and release also
       no store (SQLite file, lease table) at that URL: they create none
  125  with run --once: Tenure itself failed (what is otherwise 1, 2 or 3),
       so the command's own 1, 2 or 3 is never mistaken for Tenure's
  126  the command cannot be executed (run, pool)
  127  the command was not found (run, pool)
  N    with run --once: the command's own exit status (128+signal if killed)`

// exitError carries an exit code to Main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func usagef(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// silentExit ends the program with code and prints nothing more.
type silentExit int

func (e silentExit) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// env is the process environment the commands see; tests replace it.
type env struct {
	stdin          *os.File
	stdout, stderr io.Writer
	getenv         func(string) string
	// fromEnv maps a flag set from its TENURE_ variable (applyEnv) to the
	// variable, so an error about its value names where it came from.
	fromEnv map[string]string
}

// source is how an error names flag's value: "--flag", or the
// TENURE_FLAG variable it came from.
func (e *env) source(flag string) string {
	if v, ok := e.fromEnv[flag]; ok {
		return v
	}
	return "--" + flag
}

// Main runs the tool with args (without the program name) and returns the
// exit code. It also serves as the child guard when re-executed as one.
func Main(args []string) int {
	child.RunGuardIfRequested()
	if chaos.IsReplica() {
		// tenure verify started this process as one of its replicas.
		return chaos.ReplicaMain()
	}
	// go-redis logs connection failures on its own; the error we print
	// says it once.
	goredis.SetLogger(quietRedis{})
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	return e.main(context.Background(), args)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func (e *env) main(ctx context.Context, args []string) int {
	root := e.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var silent silentExit
	if errors.As(err, &silent) {
		return int(silent)
	}
	code := ExitUsage // cobra's own errors: unknown command, flag, argument
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if cmd, _, ferr := root.Find(args); ferr == nil && code <= ExitStore {
		if once, _ := cmd.Flags().GetBool("once"); once {
			code = ExitOnceTenure
		}
	}
	fmt.Fprintln(e.stderr, "tenure: "+oneLine(err.Error()))
	return code
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	// cobra's suggestion for a mistyped command spans lines of its own.
	if msg, sugg, ok := strings.Cut(s, "\n\nDid you mean this?\n"); ok {
		var names []string
		for _, f := range strings.Fields(sugg) {
			names = append(names, strconv.Quote(f))
		}
		s = msg + "; did you mean " + strings.Join(names, " or ") + "?"
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func (e *env) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tenure",
		Short: "Run work on exactly one replica at a time",
		Long: `tenure runs a command only while this replica holds the command's lease in a
shared store, and hands the work over fast and safely when the holder stops,
crashes or loses the store. tenure pool does the same for a whole set of
keys, spread across the replicas.

Stores are named by URL (--store or TENURE_STORE):
  sqlite:PATH                       a file shared by processes on one host
  postgres://user:pass@host/db      PostgreSQL (?table=NAME picks the table)
  mysql://user:pass@host:3306/db    MySQL 8 or MariaDB 10.6+ (?table=NAME)
  redis://[:pass@]host:6379/0       Redis (?namespace=NAME; rediss:// for TLS)
  etcd://[user:pass@]h1:2379,h2     etcd v3 (?prefix=NAME; etcd+https:// for TLS,
                                    with ?ca_file=, ?cert_file=, ?key_file=)
Without one, an SQLite file in $XDG_STATE_HOME/tenure/ (default
~/.local/state/tenure/tenure.db). Passwords are never printed. A password
runs to the last '@' before the host: write '@' and ':' as they are, and
'/', '?', '#' and '%' as %2F, %3F, %23 and %25.

Every flag can also be set with an environment variable TENURE_<FLAG>, with
dashes as underscores (TENURE_STORE, TENURE_TTL, TENURE_STOP_TIMEOUT); a flag
on the command line wins. TENURE_KEY and TENURE_OWNER are ignored when
TENURE_EPOCH is set too: they then describe the lease of a parent tenure.

` + exitCodesHelp,
		Example: `  tenure run --key mail-poller -- ./poll-mail.sh
  tenure pool --keys-file mailboxes.txt -- ./imap-sync --mailbox {key}
  tenure status --store postgres://tenure@db/ops
  tenure demo`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := e.applyEnv(cmd); err != nil {
				return err
			}
			// Checked for every command, also those that log nothing, so
			// a typo in a shared TENURE_LOG_LEVEL is caught anywhere.
			_, err := e.logger(cmd, nil)
			return err
		},
	}
	// --version prints what `tenure version` prints.
	root.Version = versionString()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return withCode(ExitUsage, err)
	})
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().String("log-format", "text", "log format: text (key=value) or json (one object a line)")
	root.AddCommand(e.runCommand(), e.poolCommand(), e.statusCommand(), e.releaseCommand(), e.pauseCommand(), e.resumeCommand(), e.moveCommand(),
		e.pruneCommand(), e.migrateCommand(), e.versionCommand(), e.demoCommand(), e.verifyCommand(), e.consoleCommand())
	return root
}

// applyEnv sets every flag not given on the command line from its
// TENURE_<FLAG> variable.
func (e *env) applyEnv(cmd *cobra.Command) error {
	nested := e.getenv("TENURE_EPOCH") != ""
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		if nested && (f.Name == "key" || f.Name == "owner") {
			return
		}
		name := "TENURE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := e.getenv(name)
		if v == "" {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			shown := v
			if f.Name == "store" {
				shown = storeurl.Redact(v)
			}
			err = usagef("%s=%s: %v", name, shown, serr)
			return
		}
		f.Changed = true
		if e.fromEnv == nil {
			e.fromEnv = make(map[string]string)
		}
		e.fromEnv[f.Name] = name
	})
	return err
}

// logger logs to stderr at the --log-level in the --log-format, scrubbing
// secrets from every value as a second line of defence behind the stores'
// own redaction.
func (e *env) logger(cmd *cobra.Command, secrets []string) (*slog.Logger, error) {
	name, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return nil, usagef("%s %q: want debug, info, warn or error", e.source("log-level"), name)
	}
	format, _ := cmd.Flags().GetString("log-format")
	newHandler := func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) }
	switch format {
	case "text":
	case "json":
		newHandler = func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(w, o) }
	default:
		return nil, usagef("%s %q: want text or json", e.source("log-format"), format)
	}
	h := newHandler(e.stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				// "15s" in both formats; JSON would print nanoseconds.
				return slog.String(a.Key, a.Value.Duration().String())
			}
			if len(secrets) == 0 {
				return a
			}
			switch a.Value.Kind() {
			case slog.KindString:
				a.Value = slog.StringValue(store.RedactString(a.Value.String(), secrets...))
			case slog.KindAny:
				if err, ok := a.Value.Any().(error); ok {
					a.Value = slog.StringValue(store.RedactString(err.Error(), secrets...))
				}
			}
			return a
		},
	})
	return slog.New(h), nil
}

// openStore opens the --store URL's store with open (storeurl.OpenSpec,
// or storeurl.OpenReadOnly for commands that only look), mapping failures
// to exit codes: the URL's fault is a usage error, anything else — no
// such store included — means the store is unreachable or unusable.
func (e *env) openStore(ctx context.Context, spec storeurl.Spec, open func(context.Context, storeurl.Spec) (storeurl.Store, error)) (storeurl.Store, error) {
	st, err := open(ctx, spec)
	if err != nil {
		if storeurl.IsURLError(err) {
			return nil, withCode(ExitUsage, e.fromStoreVar(err))
		}
		return nil, withCode(ExitStore, e.fromStoreVar(scrubErr(err, spec.Secrets)))
	}
	return st, nil
}

func (e *env) parseStore(raw string) (storeurl.Spec, error) {
	spec, err := storeurl.Parse(raw)
	if err != nil {
		return spec, withCode(ExitUsage, e.fromStoreVar(scrubErr(err, store.URLSecrets(raw))))
	}
	return spec, nil
}

// fromStoreVar names TENURE_STORE in err when the store URL came from it,
// so a user who never typed --store knows where to look.
func (e *env) fromStoreVar(err error) error {
	if v, ok := e.fromEnv["store"]; ok {
		return fmt.Errorf("%s (from the environment): %w", v, err)
	}
	return err
}

// scrubErr keeps err's chain but removes secrets from its text.
func scrubErr(err error, secrets []string) error {
	msg := err.Error()
	if clean := store.RedactString(msg, secrets...); clean != msg {
		return &scrubbed{msg: clean, err: err}
	}
	return err
}

type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }

func addStoreFlag(cmd *cobra.Command) {
	cmd.Flags().String("store", "", "lease store URL (sqlite:PATH, postgres://…, mysql://…, redis://…, etcd://…); default: an SQLite file in the user's state directory")
}
