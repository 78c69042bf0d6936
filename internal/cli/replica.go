package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	tmetrics "github.com/tenure-dev/tenure/metrics"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/console"
	"github.com/tenure-dev/tenure/internal/logqueue"
	"github.com/tenure-dev/tenure/store/memstore"
)

// killWait is how long a command is given to vanish after SIGKILL before
// the engine treats it as stuck and leaves the lease to expire.
const killWait = 2 * time.Second

// replicaFlags are the flags of the commands that hold leases and run a
// command under them: run and pool.
type replicaFlags struct {
	store, owner            string
	ttl, grace, stopTimeout time.Duration
	renewEvery              time.Duration
	maxFailures             int
	failureWindow, cooldown time.Duration
	http                    string
	httpPublic              bool
	passSighup              bool
}

func addReplicaFlags(cmd *cobra.Command, f *replicaFlags) {
	fl := cmd.Flags()
	addStoreFlag(cmd)
	fl.StringVar(&f.owner, "owner", "", "this replica's name (default hostname:pid); the store sees NAME#INCARNATION, unique per start, so replicas sharing a name never share a lease")
	fl.DurationVar(&f.ttl, "ttl", tenure.DefaultTTL, "how long a lease lives without renewal; renewed every ttl/3")
	fl.DurationVar(&f.renewEvery, "renew-every", 0, "how often leases are renewed (default ttl/3; must be under ttl/2)")
	fl.DurationVar(&f.grace, "grace", tenure.DefaultGrace, "how long past a lost holder's expiry a peer waits before taking over")
	fl.DurationVar(&f.stopTimeout, "stop-timeout", tenure.DefaultStopTimeout, "time between SIGTERM and SIGKILL when stopping the command")
	fl.IntVar(&f.maxFailures, "max-failures", 3, "after this many failed runs of the command within --failure-window, release the key to a peer for --cooldown (0: never)")
	fl.DurationVar(&f.failureWindow, "failure-window", 0, "the window --max-failures counts in (default 8 renewal periods: three tries under the restart backoff)")
	fl.DurationVar(&f.cooldown, "cooldown", 0, "how long a replica that released a failing key waits before asking for it again (default 12 renewal periods)")
	fl.BoolVar(&f.passSighup, "pass-sighup", false, "pass SIGHUP on to the command (its reload); off by default, as a command that does not expect SIGHUP dies of it")
	fl.StringVar(&f.http, "http", "", "serve the web console at /, and /metrics, /status, /healthz (alive) and /readyz (store reachable; for run, the key held here or by a known peer; for pool, its keys read) on this address (loopback only, e.g. 127.0.0.1:9090)")
	fl.BoolVar(&f.httpPublic, "http-public", false, "allow --http on a non-loopback address")
}

// checkCommandArgs checks that the command comes after --, and nothing
// before it; lead is the start of a correct command line, for the hints.
func checkCommandArgs(cmd *cobra.Command, args []string, lead string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 0:
		return usagef("put the command after --, as in: %s -- %s", lead, strings.Join(args, " "))
	case dash < 0 || len(args) == dash:
		return usagef("missing command: put it after --, as in: %s -- ./job.sh", lead)
	case dash > 0:
		return usagef("unexpected argument %q before --", args[0])
	}
	return nil
}

// replica is a run or pool command checked and ready to connect.
type replica struct {
	flags  replicaFlags
	spec   storeurl.Spec
	cfg    tenure.Config
	log    *slog.Logger
	runner *commandRunner
	// setup adds the work (a key, a pool) to a supervisor; it is tried on a
	// throwaway one first, so that its errors are usage errors reported
	// before connecting.
	setup func(*tenure.Supervisor) error
	// hangup is what SIGHUP does: a reload, never a stop or a handover.
	hangup func(*tenure.Supervisor)
	// announce logs what the replica waits for, once connected.
	announce func(*tenure.Supervisor)
	// ready, when set, is what else /readyz needs beyond Supervisor.Ready.
	ready func(*tenure.Supervisor) error
}

// prepare checks the flags, the timing and the command without connecting
// to anything, so a usage error is reported as one even while the store is
// down. keyed says whether {key} in argv stands for the key.
func (e *env) prepare(cmd *cobra.Command, f replicaFlags, argv []string, keyed bool) (*replica, error) {
	f.store, _ = cmd.Flags().GetString("store")
	spec, err := e.parseStore(f.store)
	if err != nil {
		return nil, err
	}
	if f.http != "" {
		if err := checkListenAddr(f.http, f.httpPublic); err != nil {
			return nil, err
		}
	}
	if f.ttl <= 0 || f.grace < 0 || f.stopTimeout < 0 {
		return nil, usagef("--ttl must be positive, --grace and --stop-timeout not negative (got %v, %v, %v)", f.ttl, f.grace, f.stopTimeout)
	}
	if f.renewEvery < 0 || f.renewEvery > 0 && f.renewEvery*2 >= f.ttl {
		return nil, usagef("--renew-every %v must be positive and under ttl/2 (%v): a lease must survive one missed renewal", f.renewEvery, f.ttl/2)
	}
	if f.maxFailures < 0 || f.failureWindow < 0 || f.cooldown < 0 {
		return nil, usagef("--max-failures, --failure-window and --cooldown must not be negative (got %d, %v, %v); --max-failures 0 never hands a failing key over", f.maxFailures, f.failureWindow, f.cooldown)
	}
	cfg := tenure.Config{
		Leases:      tenure.LeasesOn,
		Owner:       f.owner,
		TTL:         f.ttl,
		RenewEvery:  f.renewEvery,
		Grace:       f.grace,
		NoGrace:     cmd.Flags().Changed("grace") && f.grace == 0,
		StopTimeout: f.stopTimeout + killWait,
		Store:       memstore.New(memstore.Options{}),

		MaxFailures:   f.maxFailures,
		FailureWindow: f.failureWindow,
		Cooldown:      f.cooldown,
	}
	if f.maxFailures == 0 {
		cfg.MaxFailures = -1 // the flag's 0 is "never"; the library's is "default"
	}
	v, err := tenure.New(cfg)
	if err != nil {
		return nil, withCode(ExitUsage, flagNames(err))
	}
	cfg.Owner = v.Config().Owner // the name; each supervisor adds its own incarnation
	if err := checkTiming(f); err != nil {
		return nil, err
	}
	log, err := e.logger(cmd, spec.Secrets)
	if err != nil {
		return nil, err
	}
	r, err := newCommandRunner(argv, keyed, f.stopTimeout, log)
	if err != nil {
		return nil, err
	}
	var dropped []string
	r.env, dropped = commandEnv(os.Environ(), spec)
	for _, name := range dropped {
		log.Warn("not passing "+name+" to the command: it holds a credential", "var", name)
	}
	return &replica{flags: f, spec: spec, cfg: cfg, log: log, runner: r}, nil
}

// check runs setup on a supervisor that never runs.
func (rep *replica) check() error {
	sup, err := tenure.New(rep.cfg)
	if err == nil {
		err = rep.setup(sup)
	}
	if err != nil {
		return withCode(ExitUsage, flagNames(err))
	}
	return nil
}

// serve connects, supervises until ctx ends or a signal stops it, and
// returns the first signal that asked it to stop (0 when none did).
func (e *env) serve(ctx context.Context, stop context.CancelFunc, rep *replica) (syscall.Signal, error) {
	if err := rep.check(); err != nil {
		return 0, err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	openCtx, cancelOpen := context.WithTimeout(ctx, 30*time.Second)
	st, err := e.openStore(openCtx, rep.spec, storeurl.OpenSpec)
	cancelOpen()
	if err != nil {
		return 0, err
	}
	defer st.Close()

	metrics := tmetrics.New()
	// Nothing tenure does waits for stderr: the commands' runner, the
	// console and the signal handler log through a queue, as the
	// supervisor does (a runner that waited on its log could not hand its
	// lease over, nor a command that exited be restarted), and what is
	// queued is written out before the process exits.
	logs := logqueue.New(logqueue.DefaultSize, metrics.LogRecordsDropped)
	rep.log = slog.New(logs.Handler(rep.log.Handler()))
	rep.runner.log = rep.log
	// The signal handler, once started below, runs until the log is
	// written out: a second signal then cuts that wait short, as it cuts
	// the commands' stop short.
	var stopHandling func()
	defer func() {
		if stopHandling != nil {
			stopHandling()
		}
	}()
	logs.Start()
	defer logs.StopOrGiveUp(rep.flags.stopTimeout+killWait, rep.runner.hurry)
	cfg := rep.cfg
	cfg.Store, cfg.Logger, cfg.Observer = st, rep.log, metrics
	sup, err := tenure.New(cfg)
	if err == nil {
		err = rep.setup(sup)
	}
	if err != nil {
		return 0, withCode(ExitUsage, flagNames(err))
	}
	if rep.flags.http != "" {
		var ready func() error
		if rep.ready != nil {
			ready = func() error { return rep.ready(sup) }
		}
		// The console reads the store once a second while a page is
		// open; it is read-only here (tenure console --allow-actions acts).
		con := console.New(console.Config{Store: st, Prefix: cfg.Prefix, StoreShown: rep.spec.Shown,
			Version: versionString(), Secrets: rep.spec.Secrets, Local: sup, Grace: sup.Config().Grace,
			Public: rep.flags.httpPublic, OnDemand: true, Log: rep.log})
		// Not ctx itself: the first signal ends ctx, and the page should
		// go on showing the handover while the commands stop.
		conCtx, stopConsole := context.WithCancel(context.WithoutCancel(ctx))
		consoleDone := make(chan struct{})
		go func() { defer close(consoleDone); con.Run(conCtx) }()
		srv, err := startHTTP(rep.flags.http, rep.flags.httpPublic, sup, st, rep.spec.Secrets, metrics, ready, con.Handler(), rep.log)
		if err != nil {
			stopConsole()
			return 0, withCode(ExitFailure, err)
		}
		defer func() {
			// The console's streams end first, so open pages do not hold
			// the server's shutdown up.
			stopConsole()
			<-consoleDone
			srv.close()
		}()
	}

	if rep.announce != nil {
		rep.announce(sup)
	}
	sh := &signalHandler{log: rep.log, stop: stop, hurry: rep.runner.hurryUp}
	sh.hangup = func() { rep.hangup(sup) }
	done := make(chan struct{})
	var handling sync.WaitGroup
	handling.Go(func() { sh.handle(sigs, done) })
	stopHandling = func() {
		close(done)
		handling.Wait()
	}

	if err := sup.Run(ctx); err != nil {
		if errors.Is(err, tenure.ErrStoreRefused) {
			// Main prefixes "tenure: " itself.
			why := strings.TrimPrefix(err.Error(), "tenure: ")
			return sh.first(), withCode(ExitFailure, fmt.Errorf("giving up: %s (grant the rights, or fix the URL's user, database or table)", why))
		}
		return sh.first(), withCode(ExitFailure, fmt.Errorf("a command did not stop within --stop-timeout + %v; its lease was left to expire: %w", killWait, err))
	}
	return sh.first(), nil
}

// signalHandler turns signals into a graceful stop, and a repeated one
// into killing the commands at once.
type signalHandler struct {
	log    *slog.Logger
	stop   func() // ends the supervisor's Run: stop the commands, release
	hurry  func() // skip the rest of the stop timeout
	hangup func() // SIGHUP: reload

	mu        sync.Mutex
	signalled syscall.Signal
}

// handle reads sigs until done is closed. The first stopping signal hands
// over gracefully; a second one cuts the stop timeout short. A repeat
// within a second is the same request delivered twice (to the process and
// to its group, as timeout(1) and some shells do), not a person insisting.
func (h *signalHandler) handle(sigs <-chan os.Signal, done <-chan struct{}) {
	var first time.Time
	for {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-done:
			return
		}
		if sig == syscall.SIGHUP {
			// On its own goroutine: it logs, and a log call blocks while
			// stderr is a full pipe; a SIGTERM after it must not wait.
			go h.hangup()
			continue
		}
		h.mu.Lock()
		isFirst := h.signalled == 0
		if isFirst {
			h.signalled, first = sig.(syscall.Signal), time.Now()
		}
		h.mu.Unlock()
		// Act, then log: a log call blocks while stderr is a full pipe.
		switch {
		case isFirst:
			h.stop()
			h.log.Info("stopping: the commands are stopped, then the leases released", "signal", sig.String())
		case time.Since(first) >= time.Second:
			h.hurry()
			h.log.Warn("second signal: killing the commands now", "signal", sig.String())
		}
	}
}

// first is the first signal that asked to stop, or 0.
func (h *signalHandler) first() syscall.Signal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.signalled
}

// checkTiming refuses a stop timeout that could let a peer start while the
// command is still being stopped: the engine cancels a runner one renewal
// period (--renew-every, default ttl/3) before its lease's local deadline,
// and a peer may start grace after expiry.
func checkTiming(f replicaFlags) error {
	renew := f.renewEvery
	if renew == 0 {
		renew = f.ttl / 3
	}
	margin := renew + f.grace
	if f.stopTimeout >= margin {
		return usagef("--stop-timeout %v is too long for --ttl %v, --renew-every %v and --grace %v: a command stopped on a lost lease must be gone before a peer may start, %v (renew-every + grace) later; shorten it or raise --renew-every or --grace",
			f.stopTimeout, f.ttl, renew, f.grace, margin)
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
	if strings.Contains(msg, "FailureWindow") {
		msg = strings.NewReplacer("FailureWindow", "--failure-window", "MaxFailures", "--max-failures", "BackoffMin", "--renew-every").Replace(msg)
		return &scrubbed{msg: msg, err: err}
	}
	return err
}
