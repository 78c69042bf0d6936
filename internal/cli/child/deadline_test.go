package child

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func mustBootNow() int64 {
	now, err := bootNow()
	if err != nil {
		panic(err)
	}
	return now
}

// waitExit waits for p's exit, failing the test after within.
func waitExit(t *testing.T, p *Process, within time.Duration) Exit {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(within):
		_ = p.Signal(syscall.SIGKILL)
		t.Fatalf("the command still runs %v later", within)
	}
	exit, err := p.Exit()
	if err != nil {
		t.Fatal(err)
	}
	return exit
}

// startLead is how far ahead a deadline given to Start must lie: starting
// the guard, a race-enabled binary, can take that long on a busy machine.
const startLead = 1500 * time.Millisecond

func TestAPassedDeadlineMakesTheGuardTerminateTheGroup(t *testing.T) {
	c, pidFile := command(t, "tree")
	const after = startLead
	c.Deadline, c.StopTimeout = time.Now().Add(after), 5*time.Second
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2)
	exit := waitExit(t, p, after+3*time.Second)
	late := time.Since(c.Deadline)
	if exit.Signal != syscall.SIGTERM || !exit.Deadline {
		t.Fatalf("Exit = %+v; want killed by SIGTERM at the deadline", exit)
	}
	if late < 0 {
		t.Errorf("stopped %v before the deadline", -late)
	}
	t.Logf("the guard's SIGTERM ended the command %v after the deadline", late)
	waitGone(t, time.Second, pids...)
}

func TestACommandIgnoringTermIsKilledAStopTimeoutAfterItsDeadline(t *testing.T) {
	c, pidFile := command(t, "stubborn-tree")
	const after, stop = 300 * time.Millisecond, 400 * time.Millisecond
	c.StopTimeout = stop
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	pids := waitPids(t, pidFile, 2)
	deadline := time.Now().Add(after)
	if err := p.SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	exit := waitExit(t, p, after+stop+3*time.Second)
	late := time.Since(deadline)
	if exit.Signal != syscall.SIGKILL || !exit.Deadline {
		t.Fatalf("Exit = %+v; want killed by SIGKILL after the deadline", exit)
	}
	if late < stop {
		t.Errorf("killed %v after the deadline, before the %v stop timeout", late, stop)
	}
	waitGone(t, time.Second, pids...)
}

func TestARefreshedDeadlineKeepsTheCommandRunning(t *testing.T) {
	c, pidFile := command(t, "tree")
	const lead = 300 * time.Millisecond
	c.Deadline, c.StopTimeout = time.Now().Add(startLead), 5*time.Second
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	waitPids(t, pidFile, 2)
	// Refresh well within each deadline, across several of them.
	tick := time.NewTicker(lead / 3)
	defer tick.Stop()
	var last time.Time
	for end := time.Now().Add(5 * lead); time.Now().Before(end); {
		select {
		case <-p.Done():
			exit, _ := p.Exit()
			t.Fatalf("the command ended (%+v) although its deadline was refreshed", exit)
		case <-tick.C:
			last = time.Now().Add(lead)
			if err := p.SetDeadline(last); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Then the refreshes stop, and so does the command.
	exit := waitExit(t, p, lead+3*time.Second)
	if !exit.Deadline {
		t.Errorf("Exit = %+v; want stopped at the deadline", exit)
	}
	if late := time.Since(last); late < 0 {
		t.Errorf("stopped %v before the last deadline", -late)
	}
}

func TestTheZeroDeadlineRemovesTheDeadline(t *testing.T) {
	c, pidFile := command(t, "tree")
	const after = 200 * time.Millisecond
	c.StopTimeout = 5 * time.Second
	p, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	waitPids(t, pidFile, 2)
	if err := p.SetDeadline(time.Now().Add(after)); err != nil {
		t.Fatal(err)
	}
	if err := p.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		t.Fatal("the command was stopped at a deadline that was removed")
	case <-time.After(after + 300*time.Millisecond):
	}
	if exit, err := p.Stop(t.Context(), 5*time.Second); err != nil || exit.Deadline {
		t.Errorf("Stop = %+v, %v", exit, err)
	}
}

func TestADeadlinePassedBeforeTheGuardIsReadyStartsNothing(t *testing.T) {
	c, pidFile := command(t, "tree")
	c.Deadline = time.Now().Add(-time.Millisecond)
	if _, err := Start(c); !errors.Is(err, ErrDeadline) {
		t.Fatalf("Start = %v, want ErrDeadline", err)
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("the command started: %v", err)
	}
}

func TestAFrozenSupervisorsCommandIsStoppedAtItsDeadline(t *testing.T) {
	// The supervisor is a process of its own, so that it can be frozen
	// (SIGSTOP) the way a starved or stopped tenure is: it starts the tree
	// with a deadline and never sends another.
	pidFile := filepath.Join(t.TempDir(), "pids")
	const lead = 3 * time.Second // time to start three race-enabled processes on a busy machine
	deadline := mustBootNow() + int64(lead)
	sup := exec.Command(os.Args[0])
	sup.Env = append(os.Environ(), supervisorEnv+"=1", pidFileEnv+"="+pidFile, deadlineEnv+"="+strconv.FormatInt(deadline, 10), noExitSleep)
	sup.Stdout, sup.Stderr = os.Stdout, os.Stderr
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sup.Process.Kill(); _ = sup.Wait() }()
	pids := waitPids(t, pidFile, 2)
	if err := syscall.Kill(sup.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(sup.Process.Pid, syscall.SIGCONT) }()
	waitState(t, 'T', sup.Process.Pid)
	if left := time.Duration(deadline - mustBootNow()); left <= 0 {
		t.Fatalf("the supervisor was frozen only %v after its deadline: the machine is too slow for this test's %v lead", -left, lead)
	}
	for _, pid := range pids {
		if !testenv.Alive(pid) {
			t.Fatalf("pid %d ended before the deadline", pid)
		}
	}

	waitGone(t, lead+3*time.Second, pids...)
	late := time.Duration(mustBootNow() - deadline)
	if late < 0 {
		t.Fatalf("the command was stopped %v before its deadline", -late)
	}
	if state := testenv.ProcState(sup.Process.Pid); state != 'T' {
		t.Fatalf("the supervisor is in state %q: it was not frozen throughout", state)
	}
	t.Logf("with its supervisor frozen, the command and its grandchild were gone %v after the deadline", late)

	// Thawed, the supervisor hears the usual exit report, marked as the
	// guard's own stop.
	if err := syscall.Kill(sup.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := sup.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("supervisor exit: %v; want status 3 (the guard stopped the command at the deadline)", err)
	}
}

func TestRequestsAreDecodedAcrossReadsAndAnUnknownOneEndsThem(t *testing.T) {
	var stream bytes.Buffer
	stream.WriteByte(reqTerm)
	stream.Write(deadlineMsg(1<<40 + 7))
	stream.WriteByte(reqKill)
	stream.Write(deadlineMsg(noDeadline))
	stream.WriteByte('?') // a request this guard does not know: stop reading
	stream.WriteByte(reqInt)
	out := make(chan request, 10)
	readRequests(iotest.OneByteReader(&stream), out)
	var got []request
	for r := range out {
		got = append(got, r)
	}
	want := []request{{op: reqTerm}, {op: reqDeadline, deadline: 1<<40 + 7}, {op: reqKill}, {op: reqDeadline, deadline: noDeadline}}
	if len(got) != len(want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("decoded %+v, want %+v", got, want)
		}
	}
}

func TestDeadlinesBecomeBoottimeInstants(t *testing.T) {
	if d, err := bootDeadline(time.Time{}); err != nil || d != noDeadline {
		t.Errorf("zero time: %d, %v; want no deadline", d, err)
	}
	if d, err := bootDeadline(time.Now().Add(-1000 * time.Hour)); err != nil || d <= noDeadline || d > mustBootNow() {
		t.Errorf("long past: %d, %v; want a passed instant that is not 'none'", d, err)
	}
	if d, err := bootDeadline(time.Now().Add(math.MaxInt64)); err != nil || d != math.MaxInt64 {
		t.Errorf("far future: %d, %v; want the largest instant", d, err)
	}
	before := mustBootNow()
	d, err := bootDeadline(time.Now().Add(time.Hour))
	after := mustBootNow()
	if err != nil || d < before+int64(time.Hour)-int64(time.Millisecond) || d > after+int64(time.Hour) {
		t.Errorf("an hour ahead: %d, %v; want within [%d, %d] + 1h", d, err, before, after)
	}
}
