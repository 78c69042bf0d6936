// Black-box tests of the tenure binary: it is built once, then run as real
// processes against real stores. The test binary doubles as the supervised
// command (see child), so its behaviour is exact and needs no shell.
package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// tenureBin is the binary under test, built by TestMain.
var tenureBin string

// interrupt is what Ctrl-C sends.
var interrupt = syscall.SIGINT

const (
	childModeEnv = "TENURE_TEST_CHILD" // the mode the test binary runs in as a command
	childLogEnv  = "TENURE_TEST_LOG"   // where it appends its start/stop lines
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(child(mode))
	}
	dir, err := os.MkdirTemp("", "tenure-cli-test")
	if err != nil {
		panic(err)
	}
	tenureBin = filepath.Join(dir, "tenure")
	build := exec.Command("go", "build", "-o", tenureBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tenure:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// child is the command tenure runs. Modes:
//
//	record    append "start OWNER EPOCH PID 0 NANOS", start a grandchild and
//	          append "grand OWNER EPOCH PID GRANDPID NANOS" once it is ready;
//	          on SIGTERM append "stop …" and exit 0
//	stubborn  ignore SIGTERM, start a grandchild that ignores it too, append
//	          the start line, sleep
//	exit:N    exit with status N at once
//	tick      append "tick OWNER EPOCH PID PERIOD NANOS" (TENURE_PERIOD) and exit 0
//	env       write the environment, a variable a line, to the log; exit 0
//	sleep     sleep (a grandchild), dying on SIGTERM
//	stubborn-sleep  sleep, ignoring SIGTERM
func child(mode string) int {
	switch {
	case mode == "tick":
		period, _ := strconv.Atoi(os.Getenv("TENURE_PERIOD"))
		logLine("tick", period) // the period in the grand child's place
		return 0
	case strings.HasPrefix(mode, "exit:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(mode, "exit:"))
		return n
	case mode == "env":
		if err := os.WriteFile(os.Getenv(childLogEnv), []byte(strings.Join(os.Environ(), "\n")), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case mode == "sleep" || mode == "stubborn-sleep":
		if mode == "stubborn-sleep" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 0
	case mode == "record" || mode == "stubborn":
		// The start is logged first thing, so its time is as close as can
		// be to the moment the command began: what exclusivity is about.
		logLine("start", 0)
		terms := make(chan os.Signal, 1)
		grandMode := "sleep"
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
			grandMode = "stubborn-sleep"
		} else {
			signal.Notify(terms, syscall.SIGTERM)
		}
		// A SIGHUP (tenure passes it on as a reload) is logged, never
		// taken for a stop.
		hups := make(chan os.Signal, 1)
		signal.Notify(hups, syscall.SIGHUP)
		go func() {
			for range hups {
				logLine("hup", 0)
			}
		}()
		self, _ := os.Executable()
		grand := exec.Command(self)
		grand.Env = append(os.Environ(), childModeEnv+"="+grandMode)
		ready, err := grand.StdoutPipe()
		if err == nil {
			err = grand.Start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// Log the grandchild once it has set up its signals, so a test
		// never signals it half-started.
		if _, err := bufio.NewReader(ready).ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, "grandchild:", err)
			return 1
		}
		logLine("grand", grand.Process.Pid)
		<-terms // never, when stubborn
		logLine("stop", grand.Process.Pid)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 99
}

func logLine(what string, grandPid int) {
	f, err := os.OpenFile(os.Getenv(childLogEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	// One write per line: O_APPEND keeps lines from several processes whole.
	fmt.Fprintf(f, "%s %s %s %d %d %d %s\n", what, os.Getenv("TENURE_OWNER"), os.Getenv("TENURE_EPOCH"),
		os.Getpid(), grandPid, time.Now().UnixNano(), os.Getenv("TENURE_KEY"))
}

// childEvent is one line of a child log: "what owner epoch pid grandpid
// nanos key".
type childEvent struct {
	what       string
	owner      string // the --owner name
	id         string // TENURE_OWNER: the name and the process's incarnation
	epoch      int64
	pid, grand int
	at         time.Time
	key        string
}

func readChildLog(t *testing.T, path string) []childEvent {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []childEvent
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var ev childEvent
		var nanos int64
		if _, err := fmt.Sscanf(line, "%s %s %d %d %d %d %s", &ev.what, &ev.owner, &ev.epoch, &ev.pid, &ev.grand, &nanos, &ev.key); err != nil {
			t.Fatalf("bad child log line %q: %v", line, err)
		}
		ev.at = time.Unix(0, nanos)
		ev.id, ev.owner = ev.owner, tenure.OwnerName(ev.owner)
		if ev.what == "hup" || ev.what == "tick" {
			continue // countHups and readTicks read these
		}
		if ev.what == "grand" {
			for i := range out {
				if out[i].what == "start" && out[i].pid == ev.pid {
					out[i].grand = ev.grand
				}
			}
			continue
		}
		out = append(out, ev)
	}
	return out
}

// countHups counts the SIGHUPs recorded commands got.
func countHups(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "hup ") {
			n++
		}
	}
	return n
}

// waitStarts waits until the log has n starts, each with its grandchild
// ready, and returns the log.
func waitStarts(t *testing.T, path string, n int, within time.Duration) []childEvent {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		evs := readChildLog(t, path)
		starts := 0
		for _, ev := range evs {
			if ev.what == "start" && ev.grand != 0 {
				starts++
			}
		}
		if starts >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d command starts after %v; log: %+v", starts, n, within, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proc is a running tenure process.
type proc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan struct{}
	status int
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs tenure in the background; it is killed at the end of the test.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(tenureBin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.status = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of tenure %s:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// wait waits for p to exit and returns its exit status.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.status
	case <-time.After(within):
		t.Fatalf("tenure still running %v later; output:\n%s", within, p.out.String())
		return -1
	}
}

// runTenure runs tenure to completion and returns its output and status.
func runTenure(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tenureBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// waitGone waits until every pid is gone and returns when the last went.
func waitGone(t *testing.T, within time.Duration, pids ...int) time.Time {
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
	return time.Now()
}

// childEnv is the environment that makes the test binary the command.
func childEnv(mode, log string) []string {
	// A -race test binary sleeps a second on exit; the command's exit
	// is timed, so not here.
	return []string{childModeEnv + "=" + mode, childLogEnv + "=" + log, "GORACE=atexit_sleep_ms=0"}
}

func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
