package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store"
)

type runFlags struct {
	replicaFlags
	key      string
	once     bool
	schedule string
	noRetry  bool
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
(the lease's fencing epoch), TENURE_FENCE_KEY (the key to fence with) and
TENURE_OWNER in its environment, and
TENURE_STORE naming the store in use (from --store, TENURE_STORE or the
default) without its password or secret parameters, so that tenure status
there looks at the same store; other TENURE_ variables that hold a
credential are not passed on. Its output goes to tenure's, its input is
/dev/null. When the lease is lost, or tenure is stopped, the whole
group gets SIGTERM, then SIGKILL after --stop-timeout. If tenure itself dies
(kill -9, out of memory), a guard process kills the group at once, so a peer
never starts while an orphan still works. If tenure is frozen (SIGSTOP,
starved of CPU, deadlocked) or the machine sleeps, the guard stops the group
on its own at the lease's safety deadline — SIGTERM, then SIGKILL after
--stop-timeout — before a peer may start; resumed, tenure starts nothing
while the peer holds the key. If the guard is killed along with tenure (pkill -9 tenure), the
command is killed, but what it started in its group is out of reach: run
tenure in a cgroup (a systemd unit, a container) when that matters. Whatever
the command leaves in its group when it exits is killed too.

With --schedule SPEC the command runs once per period of the schedule
instead of all the time: cron fields ("0 3 * * *", in the local zone, or
"CRON_TZ=Europe/Berlin 0 3 * * *"), @daily, @hourly, @weekly, @monthly or
@every DURATION (periods aligned to the Unix epoch). The replica holding the
key is the scheduler: at each period's start it runs the command, and when
the command exits 0 it records the period as finished in the store, so no
replica runs that period again, across crashes and restarts. A replica that
takes the key over within a period whose run has not finished runs it at
once — also when the schedule is first deployed mid-period, and when the
holder crashed mid-run. The command gets TENURE_PERIOD, the start of the
period it runs for (Unix seconds), so a report knows which night it is
about even when it starts late; --no-retry writes a record before each run instead,
so a period runs at most once even then. A run that exits non-zero is
retried with backoff within its period. Compared with a Kubernetes CronJob
(concurrencyPolicy: Forbid) there is no overlap of runs by construction;
compared with ShedLock, a period is locked until it is done, not for a fixed
time.

A command that exits while the lease is held is restarted with exponential
backoff (from ttl/3 up to 16×ttl/3). A command that keeps failing here —
--max-failures exits (default 3) within --failure-window (default 8×ttl/3) —
is handed over: tenure releases the lease so a healthy peer takes it at
once, and does not ask for it again for --cooldown (default 4×ttl). With --once, tenure instead releases the
lease and exits with the command's exit status. --once does not remember that
the work was done: every tenure --once that later gets the lease runs the
command again; the lease only keeps the runs from overlapping.

SIGHUP to tenure never stops the command or hands the key over; with
--pass-sighup it is passed on to the command (its reload; not to the rest
of its group, whose helpers may not expect it); it never stops the command or hands the key over. SIGINT or
SIGTERM to tenure stops the command and releases the lease, so a peer takes
over at once; a command that does not die, even after SIGKILL,
keeps the lease, which then expires on its own. A second signal, a second or
more after the first, skips the rest of --stop-timeout and kills the group.

Timing: a peer may start the command ttl + grace after this replica's last
confirmed renewal; this replica stops it ttl/3 before its lease runs out, so
--stop-timeout must be shorter than --renew-every (ttl/3) + grace.

` + exitCodesHelp,
		Example: `  # one mail poller across all replicas, sharing a PostgreSQL database
  tenure run --key mail-poller --store postgres://tenure:secret@db/ops -- ./poll-mail.sh

  # a singleton poller on one host (replicas share an SQLite file)
  tenure run --key telegram-poller --store sqlite:/var/lib/app/tenure.db -- ./poller --verbose

  # a nightly report on one replica, at 03:00 Berlin time, once per night
  tenure run --key nightly-report --schedule "CRON_TZ=Europe/Berlin 0 3 * * *" -- ./report.sh

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
	addReplicaFlags(cmd, &f.replicaFlags)
	fl.BoolVar(&f.once, "once", false, "run the command once: when it exits, release the lease and exit with its status")
	fl.StringVar(&f.schedule, "schedule", "", "run the command once per period of a schedule, on one replica: cron fields (\"0 3 * * *\", \"CRON_TZ=Europe/Berlin 0 3 * * *\"), @daily, @hourly, @every 10m")
	fl.BoolVar(&f.noRetry, "no-retry", false, "with --schedule: a run cut off by a crash is not run again in its period (at most once)")
	return cmd
}

func (e *env) run(cmd *cobra.Command, f runFlags, args []string) error {
	if err := checkCommandArgs(cmd, args, "tenure run --key "+orKey(f.key)); err != nil {
		return err
	}
	if f.key == "" {
		return usagef("--key is required: it names the work, as in: tenure run --key nightly-report -- %s", args[0])
	}
	if err := store.ValidateKey(f.key); err != nil {
		return withCode(ExitUsage, err)
	}
	var sched *tenure.Schedule
	switch {
	case f.schedule != "" && f.once:
		return usagef("--schedule and --once do not go together: a schedule runs the command once per period")
	case f.noRetry && f.schedule == "":
		return usagef("--no-retry needs --schedule")
	case f.schedule != "":
		var err error
		if sched, err = tenure.ParseSchedule(f.schedule); err != nil {
			return withCode(ExitUsage, fmt.Errorf("--schedule: %w", err))
		}
	}
	rep, err := e.prepare(cmd, f.replicaFlags, args, false)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	r := rep.runner
	r.once, r.finished, r.scheduled = f.once, stop, sched != nil
	rep.setup = func(sup *tenure.Supervisor) error {
		return sup.Set(f.key, tenure.Job{Runner: r, Schedule: sched, NoRetry: f.noRetry})
	}
	rep.hangup = func(*tenure.Supervisor) {
		if !f.passSighup {
			rep.log.Info("SIGHUP: nothing to reload; the command keeps running (--pass-sighup passes it on)", "key", f.key)
			return
		}
		n := r.reload()
		rep.log.Info("SIGHUP: passed on to the command", "key", f.key, "commands", n)
	}
	rep.ready = func(sup *tenure.Supervisor) error {
		if st := sup.KeyStatus(f.key); st.Leader == "" && !st.Paused {
			return fmt.Errorf("no live holder of %s known: none here, none seen on a peer", f.key)
		}
		return nil
	}
	rep.announce = func(sup *tenure.Supervisor) {
		rep.log.Info("waiting for the lease", "key", f.key, "store", rep.spec.Shown, "owner", sup.Owner(), "ttl", f.ttl, "grace", f.grace)
	}
	signalled, err := e.serve(ctx, stop, rep)
	if err != nil {
		return err
	}
	if exit, ok := r.result(); ok {
		return silentExit(exit.ExitCode())
	}
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
