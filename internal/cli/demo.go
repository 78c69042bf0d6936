package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/sqlite"
)

// Demo timing: short enough to watch, long enough to read.
const (
	demoTTL   = 3 * time.Second
	demoGrace = time.Second
)

var demoKeys = []string{"mailer", "nightly-report"}

func (e *env) demoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Show failover between three replicas, with no setup",
		Long: fmt.Sprintf(`Start three replicas (replica-1..3) in this process on a temporary SQLite
file, with a TTL of %v and a grace of %v, and two keys. Then crash the holder
of one key (its store connection is cut: it cannot renew, and releases
nothing) and watch a peer take over after the lease expires plus grace; then
stop a holder gracefully and watch a peer take over at once. Takes about ten
seconds; the temporary file is removed at the end.`, demoTTL, demoGrace),
		Example: `  tenure demo`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.demo(cmd.Context())
		},
	}
}

// cuttable is a store whose connection the demo can cut: every call fails,
// as if the replica had frozen or lost the network, and nothing is released.
type cuttable struct {
	store.Store
	cut atomic.Bool
}

var errCut = errors.New("connection cut by the demo")

func (c *cuttable) Acquire(ctx context.Context, req store.AcquireRequest) (store.AcquireResult, error) {
	if c.cut.Load() {
		return store.AcquireResult{}, errCut
	}
	return c.Store.Acquire(ctx, req)
}

func (c *cuttable) Renew(ctx context.Context, owner string, ttl time.Duration, items []store.RenewItem) ([]bool, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.Store.Renew(ctx, owner, ttl, items)
}

func (c *cuttable) Release(ctx context.Context, owner string, terms []store.Term) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Store.Release(ctx, owner, terms)
}

func (c *cuttable) List(ctx context.Context, prefix string) ([]store.Lease, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.Store.List(ctx, prefix)
}

// Watch forwards the push channel, so a release is seen at once.
func (c *cuttable) Watch(ctx context.Context, prefix string) (<-chan store.Event, error) {
	return c.Store.(store.Watcher).Watch(ctx, prefix)
}

// demoEvent is a runner starting or stopping on a replica.
type demoEvent struct {
	at      time.Duration // since the demo began
	replica string
	key     string
	epoch   int64
	start   bool
}

// demoLog prints events as they happen and lets the demo wait for them.
type demoLog struct {
	out   io.Writer
	begin time.Time

	mu      sync.Mutex
	events  []demoEvent
	running map[string][]string // key -> replicas running it now
	overlap bool
	changed chan struct{}
}

func (d *demoLog) since() time.Duration { return time.Since(d.begin) }

func (d *demoLog) printf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format, args...)
}

func (d *demoLog) record(ev demoEvent, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.events = append(d.events, ev)
	if ev.start {
		d.running[ev.key] = append(d.running[ev.key], ev.replica)
		if len(d.running[ev.key]) > 1 {
			d.overlap = true
		}
		fmt.Fprintf(d.out, "  %6.2fs  %s starts %s (epoch %d)\n", ev.at.Seconds(), ev.replica, ev.key, ev.epoch)
	} else {
		d.running[ev.key] = slices.DeleteFunc(d.running[ev.key], func(r string) bool { return r == ev.replica })
		fmt.Fprintf(d.out, "  %6.2fs  %s stops %s (epoch %d): %s\n", ev.at.Seconds(), ev.replica, ev.key, ev.epoch, why)
	}
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until an event after index from matches, and returns it.
func (d *demoLog) waitFor(ctx context.Context, from int, timeout time.Duration, match func(demoEvent) bool) (demoEvent, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		for _, ev := range d.events[min(from, len(d.events)):] {
			if match(ev) {
				d.mu.Unlock()
				return ev, nil
			}
		}
		d.mu.Unlock()
		select {
		case <-d.changed:
		case <-deadline.C:
			return demoEvent{}, fmt.Errorf("demo: nothing happened within %v", timeout)
		case <-ctx.Done():
			return demoEvent{}, ctx.Err()
		}
	}
}

func (d *demoLog) mark() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.events)
}

func (d *demoLog) holder(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.running[key]; len(r) > 0 {
		return r[0]
	}
	return ""
}

type demoReplica struct {
	name string
	st   *cuttable
	sup  *tenure.Supervisor
	stop context.CancelFunc
	done chan struct{}
}

func (e *env) demo(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp("", "tenure-demo-")
	if err != nil {
		return withCode(ExitFailure, err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "leases.db")

	bold := func(s string) string { return s }
	if isTerminal(fileOf(e.stdout)) {
		bold = func(s string) string { return "\x1b[1m" + s + "\x1b[0m" }
	}
	d := &demoLog{out: e.stdout, begin: time.Now(), running: map[string][]string{}, changed: make(chan struct{}, 1)}
	viewer, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return withCode(ExitFailure, err)
	}
	defer viewer.Close()
	// table prints the lease table once every held lease reports its
	// runner running (a holder reports that at its next renewal).
	table := func() {
		var leases []store.Lease
		var err error
		for range 20 {
			leases, err = viewer.List(ctx, "")
			if err == nil && !slices.ContainsFunc(leases, func(l store.Lease) bool { return l.Live && !l.Running }) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if err != nil {
			fmt.Fprintf(d.out, "  (could not read the lease table: %v)\n", err)
			return
		}
		var buf bytes.Buffer
		writeTable(&buf, leases)
		fmt.Fprintln(d.out)
		for line := range strings.Lines(buf.String()) {
			fmt.Fprint(d.out, "  "+line)
		}
		fmt.Fprintln(d.out)
	}

	d.printf("%s\n  store: %s (TTL %v, grace %v, renewed every %v)\n\n",
		bold("Three replicas start and share two keys."), path, demoTTL, demoGrace, demoTTL/3)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var replicas []*demoReplica
	shutdown := func() {
		for _, r := range replicas {
			r.stop()
		}
		for _, r := range replicas {
			<-r.done
		}
	}
	defer func() {
		shutdown()
		for _, r := range replicas {
			_ = r.st.Store.(io.Closer).Close()
		}
	}()
	for i := 1; i <= 3; i++ {
		s, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			return withCode(ExitFailure, err)
		}
		r := &demoReplica{name: fmt.Sprintf("replica-%d", i), st: &cuttable{Store: s}, done: make(chan struct{})}
		r.sup, err = tenure.New(tenure.Config{
			Store: r.st, Leases: tenure.LeasesOn, Owner: r.name,
			TTL: demoTTL, Grace: demoGrace, StopTimeout: time.Second, Logger: quiet,
		})
		if err != nil {
			_ = s.Close()
			return withCode(ExitFailure, err)
		}
		// The first two replicas start with one key each, so the keys are
		// spread; every replica gets both keys once they are held.
		if i <= len(demoKeys) {
			if err := r.sup.Set(demoKeys[i-1], tenure.Job{Runner: demoRunner(d, r.name)}); err != nil {
				return withCode(ExitFailure, err)
			}
		}
		runCtx, stop := context.WithCancel(ctx)
		r.stop = stop
		go func() {
			defer close(r.done)
			_ = r.sup.Run(runCtx)
		}()
		replicas = append(replicas, r)
	}
	byName := func(name string) *demoReplica {
		for _, r := range replicas {
			if r.name == name {
				return r
			}
		}
		return nil
	}
	for _, key := range demoKeys {
		if _, err := d.waitFor(ctx, 0, 10*time.Second, func(ev demoEvent) bool { return ev.start && ev.key == key }); err != nil {
			return withCode(ExitFailure, err)
		}
	}
	for i, r := range replicas {
		for j, key := range demoKeys {
			if i == j {
				continue // set at its start
			}
			if err := r.sup.Set(key, tenure.Job{Runner: demoRunner(d, r.name)}); err != nil {
				return withCode(ExitFailure, err)
			}
		}
	}
	table()

	// A crash: the holder stops renewing and releases nothing.
	crashKey := "nightly-report"
	victim := byName(d.holder(crashKey))
	if victim == nil {
		return withCode(ExitFailure, errors.New("demo: no holder to crash"))
	}
	d.printf("%s\n  It can no longer renew and releases nothing. Its own runners stop before the\n  lease runs out (fail closed); a peer may take over only at expiry + grace.\n\n",
		bold(fmt.Sprintf("%s crashes (its store connection is cut).", victim.name)))
	mark := d.mark()
	crashAt := time.Now()
	victim.st.cut.Store(true)
	expiresIn := time.Duration(0)
	if leases, err := viewer.List(ctx, crashKey); err == nil && len(leases) > 0 {
		expiresIn = leases[0].TimeLeft
	}
	ev, err := d.waitFor(ctx, mark, demoTTL+demoGrace+5*time.Second, func(ev demoEvent) bool {
		return ev.start && ev.key == crashKey && ev.replica != victim.name
	})
	if err != nil {
		return withCode(ExitFailure, err)
	}
	took := time.Since(crashAt)
	d.printf("\n  %s took over %s %.2fs after the crash: the lease expired %.2fs after the crash\n  (last renewal + TTL %v), then grace %v passed.\n",
		ev.replica, crashKey, took.Seconds(), expiresIn.Seconds(), demoTTL, demoGrace)
	table()

	// A graceful stop: the holder stops its runner, releases, a peer takes
	// over at once.
	handKey := "mailer"
	leaving := byName(d.holder(handKey))
	if leaving == nil {
		return withCode(ExitFailure, errors.New("demo: no holder to stop"))
	}
	d.printf("%s\n  It stops its runner first, then releases the lease; no TTL or grace to wait for.\n\n",
		bold(fmt.Sprintf("%s shuts down gracefully (as on SIGTERM).", leaving.name)))
	mark = d.mark()
	stopAt := time.Now()
	leaving.stop()
	ev, err = d.waitFor(ctx, mark, demoTTL+demoGrace+5*time.Second, func(ev demoEvent) bool {
		return ev.start && ev.key == handKey && ev.replica != leaving.name
	})
	if err != nil {
		return withCode(ExitFailure, err)
	}
	d.printf("\n  %s took over %s %dms after the shutdown began.\n",
		ev.replica, handKey, time.Since(stopAt).Milliseconds())
	table()

	d.printf("%s\n\n", bold("The remaining replicas shut down."))
	shutdown()
	d.mu.Lock()
	overlap := d.overlap
	d.mu.Unlock()
	if overlap {
		return withCode(ExitFailure, errors.New("demo: two replicas ran one key at the same time"))
	}
	d.printf("At no moment did two replicas run the same key. Done in %.1fs.\n", d.since().Seconds())
	return nil
}

// demoRunner records its start and stop; it works until cancelled.
func demoRunner(d *demoLog, replica string) tenure.Runner {
	return tenure.RunnerFunc(func(ctx context.Context, lease tenure.Lease) error {
		d.record(demoEvent{at: d.since(), replica: replica, key: lease.Key, epoch: lease.Epoch, start: true}, "")
		<-ctx.Done()
		why := "stopped"
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, tenure.ErrDeadline):
			why = "no renewal confirmed before its deadline"
		case errors.Is(cause, tenure.ErrLeaseLost):
			why = "lease lost"
		case errors.Is(cause, tenure.ErrStopping):
			why = "shutting down"
		case cause != nil:
			why = cause.Error()
		}
		d.record(demoEvent{at: d.since(), replica: replica, key: lease.Key, epoch: lease.Epoch}, why)
		return nil
	})
}
