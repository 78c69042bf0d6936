package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/child"
	"github.com/tenure-dev/tenure/internal/storeurl"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

// killWait is how long a command is given to vanish after SIGKILL before
// the engine treats it as stuck and leaves the lease to expire.
const killWait = 2 * time.Second

type runFlags struct {
	key, store, owner      string
	ttl, grace, stopTimout time.Duration
	http                   string
	httpPublic, once       bool
}

func (e *env) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --key KEY [flags] -- COMMAND [ARGS...]",
		Short: "Run a command only while this replica holds the key's lease",
		Long: `Run COMMAND only while this replica holds the lease on KEY. Start the same
line on every replica: one runs the command, the others wait and take over
when it goes.

The command runs in its own process group with TENURE_KEY, TENURE_EPOCH
(the lease's fencing epoch) and TENURE_OWNER in its environment; its output
goes to tenure's, its input is /dev/null. When the lease is lost, or tenure is stopped, the whole
group gets SIGTERM, then SIGKILL after --stop-timeout. If tenure itself dies
(kill -9, out of memory), a guard process kills the group at once, so a peer
never starts while an orphan still works. Whatever the command leaves in its
group when it exits is killed too.

A command that exits while the lease is held is restarted with exponential
backoff (from ttl/3 up to 16×ttl/3). With --once, tenure instead releases the
lease and exits with the command's exit status. --once does not remember that
the work was done: every tenure --once that later gets the lease runs the
command again; the lease only keeps the runs from overlapping.

SIGINT, SIGTERM or SIGHUP to tenure stops the command and releases the lease, so a
peer takes over at once; a command that does not die, even after SIGKILL,
keeps the lease, which then expires on its own. A second signal, a second or
more after the first, skips the rest of --stop-timeout and kills the group.

Timing: a peer may start the command ttl + grace after this replica's last
confirmed renewal; this replica stops it ttl/3 before its lease runs out, so
--stop-timeout must be shorter than ttl/3 + grace.

` + exitCodesHelp,
		Example: `  # one nightly report across all replicas, sharing a PostgreSQL database
  tenure run --key nightly-report --store postgres://tenure:secret@db/ops -- ./report.sh

  # a singleton poller on one host (replicas share an SQLite file)
  tenure run --key telegram-poller --store sqlite:/var/lib/app/tenure.db -- ./poller --verbose

  # a schema migration started by every replica at boot: one at a time,
  # each exits with the migration's status
  tenure run --once --key db-migrate -- ./migrate.sh

  # with metrics and status on http://127.0.0.1:9090/metrics
  TENURE_STORE=redis://cache:6379/0 tenure run --key mailer --http 127.0.0.1:9090 -- ./mailer`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.run(cmd, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.key, "key", "", "the lease key naming the work (required)")
	addStoreFlag(cmd)
	fl.StringVar(&f.owner, "owner", "", "this replica's owner id (default hostname:pid:random)")
	fl.DurationVar(&f.ttl, "ttl", tenure.DefaultTTL, "how long a lease lives without renewal; renewed every ttl/3")
	fl.DurationVar(&f.grace, "grace", tenure.DefaultGrace, "how long past a lost holder's expiry a peer waits before taking over")
	fl.DurationVar(&f.stopTimout, "stop-timeout", tenure.DefaultStopTimeout, "time between SIGTERM and SIGKILL when stopping the command")
	fl.StringVar(&f.http, "http", "", "serve /metrics, /status and /healthz on this address (loopback only, e.g. 127.0.0.1:9090)")
	fl.BoolVar(&f.httpPublic, "http-public", false, "allow --http on a non-loopback address")
	fl.BoolVar(&f.once, "once", false, "run the command once: when it exits, release the lease and exit with its status")
	return cmd
}

func (e *env) run(cmd *cobra.Command, f runFlags, args []string) error {
	f.store, _ = cmd.Flags().GetString("store")
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 0:
		return usagef("put the command after --, as in: tenure run --key %s -- %s", orKey(f.key), strings.Join(args, " "))
	case dash < 0 || len(args) == dash:
		return usagef("missing command: put it after --, as in: tenure run --key %s -- ./job.sh", orKey(f.key))
	case dash > 0:
		return usagef("unexpected argument %q before --", args[0])
	}
	if f.key == "" {
		return usagef("--key is required: it names the work, as in: tenure run --key nightly-report -- %s", args[0])
	}
	if err := store.ValidateKey(f.key); err != nil {
		return withCode(ExitUsage, err)
	}
	spec, err := parseStore(f.store)
	if err != nil {
		return err
	}
	if f.http != "" {
		if err := checkListenAddr(f.http, f.httpPublic); err != nil {
			return err
		}
	}
	if f.ttl <= 0 || f.grace < 0 || f.stopTimout < 0 {
		return usagef("--ttl must be positive, --grace and --stop-timeout not negative (got %v, %v, %v)", f.ttl, f.grace, f.stopTimout)
	}
	cfg := tenure.Config{
		Leases:      tenure.LeasesOn,
		Owner:       f.owner,
		TTL:         f.ttl,
		Grace:       f.grace,
		NoGrace:     cmd.Flags().Changed("grace") && f.grace == 0,
		StopTimeout: f.stopTimout + killWait,
	}
	// Validate the whole configuration before connecting, so a usage error
	// is reported as one even while the store is down.
	cfg.Store = memstore.New(memstore.Options{})
	if _, err := tenure.New(cfg); err != nil {
		return withCode(ExitUsage, flagNames(err))
	}
	if err := checkTiming(f); err != nil {
		return err
	}
	path, err := lookCommand(args[0])
	if err != nil {
		return err
	}

	log, err := e.logger(cmd, storeurl.Secrets(spec.URL))
	if err != nil {
		return err
	}

	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	openCtx, cancelOpen := context.WithTimeout(ctx, 30*time.Second)
	st, err := openStore(openCtx, spec)
	cancelOpen()
	if err != nil {
		return err
	}
	defer st.Close()

	metrics := tenure.NewMetrics()
	cfg.Store, cfg.Logger, cfg.Metrics = st, log, metrics
	sup, err := tenure.New(cfg)
	if err != nil {
		return withCode(ExitUsage, flagNames(err))
	}
	r := &commandRunner{
		path: path, args: args[1:], stopTimeout: f.stopTimout, once: f.once,
		log: log, finished: stop, hurry: make(chan struct{}),
	}
	if err := sup.Set(f.key, tenure.Job{Runner: r}); err != nil {
		return withCode(ExitUsage, err)
	}

	var srv *httpServer
	if f.http != "" {
		srv, err = startHTTP(f.http, sup, st, storeurl.Secrets(spec.URL), metrics, log)
		if err != nil {
			return withCode(ExitFailure, err)
		}
		defer srv.close()
	}

	// The first signal hands over gracefully; a second one cuts the stop
	// timeout short. A repeat within a second is the same request delivered
	// twice (to the process and to its group, as timeout(1) and some
	// shells do), not a person insisting.
	var signalled syscall.Signal
	var sigMu sync.Mutex
	go func() {
		var first time.Time
		for sig := range sigs {
			sigMu.Lock()
			isFirst := signalled == 0
			if isFirst {
				signalled, first = sig.(syscall.Signal), time.Now()
			}
			sigMu.Unlock()
			switch {
			case isFirst:
				log.Info("stopping: the command is stopped, then the lease released", "signal", sig.String())
				stop()
			case time.Since(first) >= time.Second:
				log.Warn("second signal: killing the command now", "signal", sig.String())
				r.hurryUp()
			}
		}
	}()

	log.Info("waiting for the lease", "key", f.key, "store", spec.Shown, "owner", sup.Owner(),
		"ttl", cfg.TTL, "grace", sup.Config().Grace)
	runErr := sup.Run(ctx)
	if runErr != nil {
		return withCode(ExitFailure, fmt.Errorf("the command did not stop within --stop-timeout + %v; its lease was left to expire: %w", killWait, runErr))
	}
	if exit, ok := r.result(); ok {
		return silentExit(exit.ExitCode())
	}
	sigMu.Lock()
	defer sigMu.Unlock()
	if f.once && signalled != 0 {
		return silentExit(128 + int(signalled))
	}
	return nil
}

func orKey(key string) string {
	if key == "" {
		return "KEY"
	}
	return key
}

// checkTiming refuses a stop timeout that could let a peer start while the
// command is still being stopped: the engine cancels a runner ttl/3 before
// its lease's local deadline, and a peer may start grace after expiry.
func checkTiming(f runFlags) error {
	margin := f.ttl/3 + f.grace
	if f.stopTimout >= margin {
		return usagef("--stop-timeout %v is too long for --ttl %v and --grace %v: a command stopped on a lost lease must be gone before a peer may start, %v (ttl/3 + grace) later; shorten it or raise --ttl or --grace",
			f.stopTimout, f.ttl, f.grace, margin)
	}
	return nil
}

// flagNames rewrites the engine's config field names as the flags that set
// them.
func flagNames(err error) error {
	msg := err.Error()
	for field, flag := range map[string]string{
		"TTL: ": "--ttl: ", "Grace: ": "--grace: ", "Owner: ": "--owner: ",
		"StopTimeout: ": "--stop-timeout: ", "RenewEvery: ": "--ttl (renewed every ttl/3): ",
		"CallTimeout: ": "--ttl (store calls bounded by ttl/6): ",
	} {
		if strings.HasPrefix(msg, field) {
			return &scrubbed{msg: flag + strings.TrimPrefix(msg, field), err: err}
		}
	}
	return err
}

// lookCommand resolves the command like a shell would, with the shell's
// exit codes for a command that is missing or not executable.
func lookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return "", withCode(ExitNoFound, fmt.Errorf("command not found: %s", name))
	}
	return "", withCode(ExitNoExec, fmt.Errorf("cannot execute %s: %w", name, errors.Unwrap(err)))
}

// commandRunner is the Runner of the key: it runs the command as a child
// while the engine lets it, and never returns while the child is alive, so
// the engine cannot release the lease (and let a peer start) too early.
type commandRunner struct {
	path        string
	args        []string
	stopTimeout time.Duration
	once        bool
	log         *slog.Logger
	finished    context.CancelFunc // ends the supervisor's Run (--once)

	hurryOnce sync.Once
	hurry     chan struct{}

	mu   sync.Mutex
	exit *child.Exit
}

func (r *commandRunner) Run(ctx context.Context, lease tenure.Lease) error {
	if _, done := r.result(); done {
		<-ctx.Done() // --once: the command ran; wait for the shutdown
		return nil
	}
	p, err := child.Start(child.Command{
		Path: r.path, Args: r.args, Env: childEnv(os.Environ(), lease),
		Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		return err
	}
	log := r.log.With("key", lease.Key, "epoch", lease.Epoch, "pid", p.Pid())
	log.Info("command started")
	select {
	case <-p.Done():
		exit, err := p.Exit()
		if err != nil {
			log.Warn("command ended", "err", err)
		}
		if r.once {
			log.Info("command finished; releasing the lease", "exit", exit.String())
			r.mu.Lock()
			r.exit = &exit
			r.mu.Unlock()
			r.finished()
			<-ctx.Done()
			return nil
		}
		return fmt.Errorf("command %s while the lease was held", exit)
	case <-ctx.Done():
	}
	log.Info("stopping the command", "cause", context.Cause(ctx), "stop_timeout", r.stopTimeout)
	hurry, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.hurry:
			cancel()
		case <-hurry.Done():
		}
	}()
	exit, _ := p.Stop(hurry, r.stopTimeout)
	log.Info("command stopped", "exit", exit.String())
	return nil
}

func (r *commandRunner) hurryUp() { r.hurryOnce.Do(func() { close(r.hurry) }) }

// result is the command's exit under --once, once it has finished.
func (r *commandRunner) result() (child.Exit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exit == nil {
		return child.Exit{}, false
	}
	return *r.exit, true
}

// childEnv is environ with the lease's variables, replacing any inherited
// from a parent tenure.
func childEnv(environ []string, lease tenure.Lease) []string {
	out := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "TENURE_KEY" || name == "TENURE_EPOCH" || name == "TENURE_OWNER" {
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"TENURE_KEY="+lease.Key,
		"TENURE_EPOCH="+strconv.FormatInt(lease.Epoch, 10),
		"TENURE_OWNER="+lease.Owner)
}
