package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/child"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/store"
)

// keyPlaceholder, in a pool's command or its arguments, stands for the key.
const keyPlaceholder = "{key}"

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

// commandRunner is the Runner of a key (run) or of every key of a pool:
// it runs the command as a child while the engine lets it, and never
// returns while the child is alive, so the engine cannot release the lease
// (and let a peer start) too early. One runner serves any number of keys
// at once.
type commandRunner struct {
	// name is the command as given; path is where it was found, or "" when
	// name holds {key} and is looked up for each key.
	name, path  string
	args        []string
	keyed       bool // replace {key} in name and args with the lease's key
	stopTimeout time.Duration
	once        bool
	scheduled   bool // --schedule: an exit 0 finishes the period's run
	// env is the commands' environment without the lease's variables; see
	// commandEnv.
	env      []string
	log      *slog.Logger
	finished context.CancelFunc // ends the supervisor's Run (--once)

	hurryOnce sync.Once
	hurry     chan struct{}

	mu      sync.Mutex
	exit    *child.Exit
	running map[*child.Process]bool // the commands started and not yet exited
}

// newCommandRunner resolves the command now, unless its name depends on
// the key, so that a missing command is reported at start.
func newCommandRunner(argv []string, keyed bool, stopTimeout time.Duration, log *slog.Logger) (*commandRunner, error) {
	r := &commandRunner{name: argv[0], args: argv[1:], keyed: keyed, stopTimeout: stopTimeout, log: log, hurry: make(chan struct{})}
	if keyed && strings.Contains(r.name, keyPlaceholder) {
		return r, nil
	}
	path, err := lookCommand(r.name)
	r.path = path
	return r, err
}

// command is the program and arguments for lease.
func (r *commandRunner) command(lease tenure.Lease) (string, []string, error) {
	if !r.keyed {
		return r.path, r.args, nil
	}
	args := make([]string, len(r.args))
	for i, a := range r.args {
		args[i] = strings.ReplaceAll(a, keyPlaceholder, lease.Key)
	}
	if r.path != "" {
		return r.path, args, nil
	}
	path, err := lookCommand(strings.ReplaceAll(r.name, keyPlaceholder, lease.Key))
	return path, args, err
}

func (r *commandRunner) Run(ctx context.Context, lease tenure.Lease) error {
	if _, done := r.result(); done {
		<-ctx.Done() // --once: the command ran; wait for the shutdown
		return nil
	}
	path, args, err := r.command(lease)
	if err != nil {
		return err
	}
	// The guard gets the lease's safety deadline from the start and stops
	// the command there on its own, should this process be frozen then.
	stopAt, _, _ := lease.StopAt() // zero without a lease: no deadline
	if ctx.Err() != nil {
		return nil // stopped before it began
	}
	p, err := child.Start(child.Command{
		Path: path, Args: args, Env: childEnv(ctx, r.env, lease),
		Stdout: os.Stdout, Stderr: os.Stderr,
		Deadline: stopAt, StopTimeout: r.stopTimeout,
	})
	if err != nil {
		return err
	}
	r.track(p, true)
	defer r.track(p, false)
	log := r.log.With("key", lease.Key, "epoch", lease.Epoch, "pid", p.Pid())
	// Stopping the command and passing on new deadlines run on their own
	// goroutines from here on: a log call blocks while stderr is a full
	// pipe, and must delay neither.
	signalled := make(chan struct{})
	stopped := make(chan child.Exit, 1)
	go func() { stopped <- r.stop(ctx, p, signalled) }()
	forwarded := make(chan time.Time, 1)
	go func() { forwarded <- child.ForwardStopAt(lease, p, stopAt, log) }()
	enforced := sync.OnceValue(func() time.Time { return <-forwarded }) // the last deadline the guard got
	defer enforced()

	log.Info("command started")
	select {
	case <-p.Done():
		exit := <-stopped
		_, err := p.Exit()
		if err != nil {
			log.Warn("command ended", "err", err)
		}
		if exit.Deadline {
			// The guard stopped it on its own: this process was frozen,
			// or the machine slept (which the engine's monotonic clock
			// does not count), or a renewal came too late. A peer may
			// hold the key by now, so a restart waits for the store to
			// confirm the lease again. Not the command's doing, so not its
			// result under --once either.
			log.Warn("the guard stopped the command at the lease's safety deadline", "exit", exit.String())
			if !child.AwaitRenewal(ctx, lease, enforced()) {
				return nil
			}
			return fmt.Errorf("command stopped by its guard at the lease's safety deadline: %s", exit)
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
		if r.scheduled {
			if exit.ExitCode() == 0 {
				log.Info("command finished", "exit", exit.String())
				return nil
			}
			return fmt.Errorf("command %s", exit)
		}
		return fmt.Errorf("command %s while the lease was held", exit)
	case <-signalled:
	}
	log.Info("stopping the command", "cause", context.Cause(ctx), "stop_timeout", r.stopTimeout)
	exit := <-stopped
	log.Info("command stopped", "exit", exit.String())
	return nil
}

// stop waits for ctx to end and then stops p: SIGTERM to its group, then
// closes signalled, then SIGKILL after the stop timeout, or at once after
// hurryUp. It returns p's exit, however p ended.
func (r *commandRunner) stop(ctx context.Context, p *child.Process, signalled chan<- struct{}) child.Exit {
	select {
	case <-p.Done():
		exit, _ := p.Exit()
		return exit
	case <-ctx.Done():
	}
	_ = p.Terminate()
	close(signalled)
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
	return exit
}

// track records that p runs (or no longer does), for reload.
func (r *commandRunner) track(p *child.Process, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		r.running = make(map[*child.Process]bool)
	}
	if running {
		r.running[p] = true
	} else {
		delete(r.running, p)
	}
}

// reload passes SIGHUP to every running command (not its group) and
// returns how many it reached: the conventional "reload your configuration", never a
// stop or a handover.
func (r *commandRunner) reload() int {
	r.mu.Lock()
	procs := make([]*child.Process, 0, len(r.running))
	for p := range r.running {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	n := 0
	for _, p := range procs {
		if p.Signal(syscall.SIGHUP) == nil {
			n++
		}
	}
	return n
}

// hurryUp cuts the stop timeout short: every command being stopped, or
// stopped from now on, is killed at once.
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

// credentialRE finds a secret named in a variable's value: password=,
// PGPASSWORD=, token: and the like.
var credentialRE = regexp.MustCompile(`(?i)(password|passwd|pwd|secret|token)\s*[=:]`)

// commandEnv is the environment of every command tenure runs for the work
// (the commands of run and pool, and pool's --keys-cmd): environ with
// TENURE_STORE naming the store in use without its credentials, so that a
// tenure status there looks at the same store, never at the default one,
// and a client of the store brings its own credentials (.pgpass,
// PGPASSWORD); without TENURE_KEY, TENURE_FENCE_KEY, TENURE_EPOCH and
// TENURE_OWNER, which are set per lease; and without any other TENURE_ variable that holds a
// secret — the store's password, or a credential of its own. dropped
// names the variables left out for holding one.
func commandEnv(environ []string, spec storeurl.Spec) (env, dropped []string) {
	env = make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case name == "TENURE_STORE" || name == "TENURE_KEY" || name == "TENURE_FENCE_KEY" || name == "TENURE_EPOCH" || name == "TENURE_OWNER":
			continue
		case strings.HasPrefix(name, "TENURE_") && (store.RedactString(value, spec.Secrets...) != value ||
			len(store.URLSecrets(value)) > 0 || credentialRE.MatchString(value)):
			dropped = append(dropped, name)
			continue
		}
		env = append(env, kv)
	}
	return append(env, "TENURE_STORE="+spec.Public), dropped
}

// childEnv is env with the lease's variables, and for a scheduled run
// TENURE_PERIOD, the start of its period (Unix seconds).
func childEnv(ctx context.Context, env []string, lease tenure.Lease) []string {
	out := append(slices.Clip(env),
		"TENURE_KEY="+lease.Key,
		"TENURE_FENCE_KEY="+lease.FenceKey,
		"TENURE_EPOCH="+strconv.FormatInt(lease.Epoch, 10),
		"TENURE_OWNER="+lease.Owner)
	if p, ok := tenure.Period(ctx); ok {
		out = append(out, "TENURE_PERIOD="+strconv.FormatInt(p.Unix(), 10))
	}
	return out
}
