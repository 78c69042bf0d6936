package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// The test binary plays every part: the guard (RunGuardIfRequested), the
// command and its grandchildren (helperEnv), and a supervisor that can be
// killed with -9 (supervisorEnv).
const (
	helperEnv     = "CHILD_TEST_HELPER"
	pidFileEnv    = "CHILD_TEST_PIDS"
	supervisorEnv = "CHILD_TEST_SUPERVISOR"
	deadlineEnv   = "CHILD_TEST_DEADLINE" // the supervisor's deadline, a CLOCK_BOOTTIME instant
	// A -race binary sleeps a second before exiting; the guard and the
	// helpers are this binary, and the tests time them.
	noExitSleep = "GORACE=atexit_sleep_ms=0"
)

func TestMain(m *testing.M) {
	RunGuardIfRequested()
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	if os.Getenv(supervisorEnv) != "" {
		os.Exit(supervisor())
	}
	os.Exit(m.Run())
}

// helper is the command. Modes:
//
//	exit:N         exit with status N
//	env            print TENURE_KEY and exit
//	tree           start a grandchild, record both pids once it is ready, sleep
//	stubborn-tree  the same, both ignoring SIGTERM
//	leave-behind   start a grandchild, record both pids, exit 0
//	sleep          print "ready", sleep (a grandchild's role)
//	stubborn       the same, ignoring SIGTERM
func helper(mode string) int {
	switch {
	case strings.HasPrefix(mode, "exit:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(mode, "exit:"))
		return n
	case mode == "env":
		fmt.Println("TENURE_KEY=" + os.Getenv("TENURE_KEY"))
		return 0
	case mode == "sleep" || mode == "stubborn":
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("ready") // to the parent, which records our pid
		time.Sleep(time.Minute)
		return 0
	case mode == "tree" || mode == "stubborn-tree" || mode == "leave-behind":
		grand := "sleep"
		if mode == "stubborn-tree" {
			signal.Ignore(syscall.SIGTERM)
			grand = "stubborn"
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"="+grand)
		cmd.Stderr = os.Stderr
		ready, err := cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// Record only once the grandchild has set up its signals, so a
		// test never signals it half-started.
		if _, err := bufio.NewReader(ready).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "grandchild:", err)
			return 1
		}
		recordPids(os.Getpid(), cmd.Process.Pid)
		if mode == "leave-behind" {
			return 0
		}
		time.Sleep(time.Minute)
		return 0
	}
	return 99
}

func recordPids(pids ...int) {
	f, err := os.OpenFile(os.Getenv(pidFileEnv), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		panic(err)
	}
	for _, pid := range pids {
		fmt.Fprintln(f, pid)
	}
	f.Close()
}

// supervisor starts a tree through a guard, with the deadline in
// deadlineEnv if set, and waits to be killed or for the tree to end: it
// exits 3 when the guard reports that it stopped the tree at its deadline.
func supervisor() int {
	c := Command{
		Path: os.Args[0], Env: append(os.Environ(), helperEnv+"=tree", supervisorEnv+"="),
		Stdout: os.Stdout, Stderr: os.Stderr, StopTimeout: 5 * time.Second,
	}
	if v := os.Getenv(deadlineEnv); v != "" {
		boot, _ := strconv.ParseInt(v, 10, 64)
		c.Deadline = time.Now().Add(time.Duration(boot - mustBootNow()))
	}
	p, err := Start(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if exit, _ := p.Exit(); exit.Deadline {
		return 3
	}
	return 0
}

func command(t *testing.T, mode string) (Command, string) {
	pids := filepath.Join(t.TempDir(), "pids")
	return Command{
		Path:   os.Args[0],
		Env:    append(os.Environ(), helperEnv+"="+mode, pidFileEnv+"="+pids, noExitSleep),
		Stdout: os.Stdout, Stderr: os.Stderr,
	}, pids
}

// waitPids waits until n processes have recorded their pids.
func waitPids(t *testing.T, file string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(file)
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(f)
			pids = append(pids, pid)
		}
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d processes started", len(pids), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitGone(t *testing.T, within time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for testenv.Alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still alive %v later", pid, within)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestExitStatusIsReported(t *testing.T) {
	c, _ := command(t, "exit:7")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	exit, err := p.Exit()
	if err != nil || exit.Code != 7 || exit.Signal != 0 || exit.ExitCode() != 7 {
		t.Fatalf("Exit = %+v, %v; want status 7", exit, err)
	}
}

func TestEnvironmentReachesTheCommand(t *testing.T) {
	c, _ := command(t, "env")
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c.Stdout = f
	c.Env = append(c.Env, "TENURE_KEY=nightly")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exit(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	if strings.TrimSpace(string(data)) != "TENURE_KEY=nightly" {
		t.Fatalf("command printed %q", data)
	}
}

func TestMissingProgramFailsToStart(t *testing.T) {
	_, err := Start(Command{Path: "/nonexistent/program", Stdout: os.Stdout, Stderr: os.Stderr})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/program") {
		t.Fatalf("Start = %v, want an error naming the program", err)
	}
}

func TestStopTerminatesTheWholeGroup(t *testing.T) {
	c, pidFile := command(t, "tree")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2)
	start := time.Now()
	exit, err := p.Stop(t.Context(), 5*time.Second)
	if err != nil || exit.Signal != syscall.SIGTERM {
		t.Fatalf("Stop = %v, %v; want killed by SIGTERM", exit, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Stop took %v for a command that obeys SIGTERM", took)
	}
	waitGone(t, time.Second, pids...)
}

func TestCommandIgnoringTermIsKilledAfterTheStopTimeoutWithItsGrandchildren(t *testing.T) {
	c, pidFile := command(t, "stubborn-tree")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2)
	start := time.Now()
	const timeout = 300 * time.Millisecond
	exit, err := p.Stop(t.Context(), timeout)
	took := time.Since(start)
	if err != nil || exit.Signal != syscall.SIGKILL || exit.ExitCode() != 137 {
		t.Fatalf("Stop = %v, %v; want killed by SIGKILL", exit, err)
	}
	if took < timeout || took > timeout+2*time.Second {
		t.Errorf("Stop took %v, want just over the %v stop timeout", took, timeout)
	}
	waitGone(t, time.Second, pids...)
}

func TestWhatTheCommandLeavesBehindDiesWithIt(t *testing.T) {
	c, pidFile := command(t, "leave-behind")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	exit, err := p.Exit()
	if err != nil || exit.Code != 0 {
		t.Fatalf("Exit = %v, %v", exit, err)
	}
	waitGone(t, time.Second, waitPids(t, pidFile, 2)...)
}

func TestKillingTheSupervisorKillsTheCommandAndItsGrandchildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	sup := exec.Command(os.Args[0])
	sup.Env = append(os.Environ(), supervisorEnv+"=1", pidFileEnv+"="+pidFile, noExitSleep)
	sup.Stdout, sup.Stderr = os.Stdout, os.Stderr
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2)
	if err := sup.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sup.Wait()
	waitGone(t, time.Second, pids...)
}

func TestKillingTheGuardByHandStillKillsTheGroup(t *testing.T) {
	c, pidFile := command(t, "stubborn-tree")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2)
	if err := p.guard.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, err = p.Exit()
	if !errors.Is(err, ErrGuardLost) {
		t.Fatalf("Exit error = %v, want ErrGuardLost", err)
	}
	waitGone(t, time.Second, pids...)
}

func TestSignalsAfterExitAreHarmless(t *testing.T) {
	c, _ := command(t, "exit:0")
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("Signal after exit: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if exit, err := p.Stop(ctx, time.Second); err != nil || exit.Code != 0 {
		t.Errorf("Stop after exit = %v, %v", exit, err)
	}
	if err := p.Signal(syscall.SIGUSR1); err == nil {
		t.Error("SIGUSR1 was accepted; only TERM, INT and KILL are forwarded")
	}
}

func TestKillingTheSupervisorAndTheGuardAtOnceStillKillsTheCommand(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	sup := exec.Command(os.Args[0])
	sup.Env = append(os.Environ(), supervisorEnv+"=1", pidFileEnv+"="+pidFile, noExitSleep)
	sup.Stdout, sup.Stderr = os.Stdout, os.Stderr
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2) // the command, its grandchild
	command, grandchild := pids[0], pids[1]
	// The command's grandchild is out of reach once both are dead (see the
	// package doc); do not leave it behind.
	t.Cleanup(func() { _ = syscall.Kill(-command, syscall.SIGKILL) })
	guard := testenv.ParentPid(t, command)
	if guard == sup.Process.Pid || guard <= 1 {
		t.Fatalf("the command's parent %d is not a guard", guard)
	}
	// pkill -9 tenure signals both, one after the other. Freeze both first
	// so that neither reacts to the other's death, then kill the guard
	// first: killing the stopped supervisor first would orphan the stopped
	// guard's process group, and the kernel resumes such a group (SIGHUP,
	// SIGCONT), letting the guard kill the command after all.
	for _, pid := range []int{sup.Process.Pid, guard} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, 'T', sup.Process.Pid, guard)
	killedAt := time.Now()
	for _, pid := range []int{guard, sup.Process.Pid} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	_ = sup.Wait()
	waitGone(t, time.Second, command)
	t.Logf("the command was gone %v after kill -9 of its supervisor and guard; its grandchild alive: %v", time.Since(killedAt), testenv.Alive(grandchild))
}

// waitState waits until every pid is in state (as /proc shows it: 'T' for
// stopped).
func waitState(t *testing.T, state byte, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for testenv.ProcState(pid) != state {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d is in state %q, not %q", pid, testenv.ProcState(pid), state)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
