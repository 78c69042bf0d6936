//go:build linux

package poolload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// A worker process is this test binary run again; it never returns to
	// the test framework.
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

// worker is a worker process seen from the parent.
type worker struct {
	spec    childSpec
	cmd     *exec.Cmd
	logPath string

	mu    sync.Mutex // one request in flight
	stdin io.WriteCloser
	out   *bufio.Scanner
	done  chan error
}

// startWorkers starts n worker processes. Each dies with the parent: the
// kernel SIGKILLs it when the parent goes (Pdeathsig), and it shuts down
// by itself at the end of its stdin, which a parent that exits closes.
// When the test ends, any still running is stopped.
func startWorkers(t *testing.T, specs []childSpec) []*worker {
	t.Helper()
	ws := make([]*worker, 0, len(specs))
	t.Cleanup(func() {
		for _, w := range ws {
			if err := w.stop(5 * time.Second); err != nil {
				t.Logf("worker w%02d: %v", w.spec.Index, err)
			}
		}
	})
	// POOLLOAD_LOGS=dir keeps the workers' logs (warnings and errors)
	// after the test; by default they go with it.
	dir := t.TempDir()
	if keep := os.Getenv("POOLLOAD_LOGS"); keep != "" {
		dir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, sp := range specs {
		raw, err := json.Marshal(sp)
		if err != nil {
			t.Fatal(err)
		}
		w := &worker{spec: sp, logPath: filepath.Join(dir, fmt.Sprintf("w%02d.log", sp.Index)), done: make(chan error, 1)}
		logf, err := os.Create(w.logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
		cmd.Stderr = logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if w.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", sp.Index, err)
		}
		logf.Close() // the child has its own copy
		w.cmd = cmd
		w.out = bufio.NewScanner(stdout)
		w.out.Buffer(make([]byte, 64<<10), 1<<20)
		ws = append(ws, w)
	}
	return ws
}

// ask sends a request ("sample" or "gc") and reads the answer.
func (w *worker) ask(req string) (sample, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s sample
	if w.stdin == nil {
		return s, errors.New("stopped")
	}
	if _, err := io.WriteString(w.stdin, req+"\n"); err != nil {
		return s, fmt.Errorf("w%02d: %w (log: %s)", w.spec.Index, err, w.logTail())
	}
	if !w.out.Scan() {
		return s, fmt.Errorf("w%02d: no answer: %v (log: %s)", w.spec.Index, w.out.Err(), w.logTail())
	}
	if err := json.Unmarshal(w.out.Bytes(), &s); err != nil {
		return s, fmt.Errorf("w%02d: %w", w.spec.Index, err)
	}
	if s.Err != "" {
		return s, fmt.Errorf("w%02d: %s (log: %s)", w.spec.Index, s.Err, w.logTail())
	}
	return s, nil
}

// sampleAll asks every worker at once, so the samples are close in time.
func sampleAll(ws []*worker, req string) ([]sample, error) {
	out := make([]sample, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { out[i], errs[i] = w.ask(req) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// stop closes the worker's stdin, which shuts it down gracefully (its
// keys released), and waits up to limit before killing it.
func (w *worker) stop(limit time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stdin == nil {
		return nil
	}
	w.stdin.Close()
	w.stdin = nil
	go func() {
		for w.out.Scan() { // drain, so the child never blocks on stdout
		}
		w.done <- w.cmd.Wait()
	}()
	select {
	case err := <-w.done:
		if err != nil {
			return fmt.Errorf("exit: %v (log: %s)", err, w.logTail())
		}
		return nil
	case <-time.After(limit):
		_ = w.cmd.Process.Kill()
		<-w.done
		return fmt.Errorf("did not exit within %v of shutdown; killed", limit)
	}
}

// logTail is the end of the worker's log, for an error message.
func (w *worker) logTail() string {
	data, _ := os.ReadFile(w.logPath)
	return string(data[max(0, len(data)-2000):])
}

// logHead is the start of the worker's log: its first warnings.
func (w *worker) logHead(n int) string {
	data, _ := os.ReadFile(w.logPath)
	return string(data[:min(len(data), n)])
}
