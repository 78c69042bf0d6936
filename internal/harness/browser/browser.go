// Package browser drives a real headless Chromium from tests, so a test can
// load a page that a test server serves and check what a person would see:
// text that a script fills in, what a click changes, the outline of the page,
// a screenshot, and that the page threw no error.
//
// A [Browser] belongs to one test. [Start] launches a private Chromium with a
// fresh profile and stops it when the test ends. Every call is bounded by a
// timeout, so a hung browser fails the test instead of stalling the run.
//
// The package does not promise pixel-stable screenshots (fonts and
// rendering differ between machines); compare [Browser.Structure] outlines
// instead and keep screenshots for people to look at.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// DefaultTimeout bounds each call of a [Browser] whose Timeout is zero. It is
// generous because CI machines are small and busy; a healthy browser answers
// in milliseconds, so only a hung one ever waits this long.
const DefaultTimeout = 20 * time.Second

// EnvChromium names the environment variable that, when set, is the path of
// the Chromium (or Chrome) binary to use instead of searching for one.
const EnvChromium = "TENURE_CHROMIUM"

// defaultChromium is where Debian's chromium package puts the browser.
const defaultChromium = "/usr/bin/chromium"

// chromiumNames are looked up in PATH when neither EnvChromium nor
// defaultChromium names a browser.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome"}

// Browser is one headless Chromium with one tab, owned by one test. Its
// methods are not safe for concurrent use: they drive the same tab, and two
// navigations at once would race. ConsoleErrors may be called at any time.
type Browser struct {
	// Timeout bounds each call; zero means DefaultTimeout. WaitText takes its
	// own timeout instead.
	Timeout time.Duration

	// ctx is the tab's chromedp context. It is kept here, against the usual
	// rule, because the browser lives exactly as long as the test and the
	// test-facing methods take no context; each call derives its own timeout
	// from it.
	ctx context.Context

	mu     sync.Mutex
	errors []string // JavaScript exceptions and console.error messages
}

// Start launches a headless Chromium for the test and returns it with a blank
// tab open. The browser and its profile are removed when the test ends.
//
// When no Chromium is installed, Start skips the test, or fails it when
// CI=true (see testenv.Unavailable).
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := findChromium()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	// The flags keep a test browser quiet and self-contained: no sandbox
	// (tests often run as root in containers, where the sandbox cannot
	// start), no GPU, and no background traffic (updates, sync, QUIC
	// probes), which on a machine with a closed network keeps retrying
	// lookups and connections. The profile is fresh so no state leaks
	// between tests.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// Even with the flags above, Chromium 156 still looks up
		// accounts.google.com, update.googleapis.com and a few more at
		// start. Test pages come from local servers, so resolve no name but
		// the loopback names and addresses (httptest serves on 127.0.0.1).
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]"),
		// /dev/shm is small in many containers and Chromium crashes when it
		// fills up; the temporary directory is slower but never too small.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	root, stop := context.WithCancel(context.Background())
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(root, opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b := &Browser{ctx: ctx}
	t.Cleanup(func() {
		// Close gracefully so Chromium flushes and exits before t.TempDir
		// removes its profile; the cancels below kill it if it hangs.
		cctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
		if err := chromedp.Cancel(cctx); err != nil {
			t.Logf("browser: closing Chromium: %v", err)
		}
		cancel()
		cancelTab()
		cancelAlloc()
		stop()
	})

	// The first call starts the browser and binds its life to ctx, so it
	// must not carry a deadline of its own; a timer stops a start that hangs.
	timer := time.AfterFunc(DefaultTimeout, stop)
	err = chromedp.Do(ctx)
	if !timer.Stop() {
		t.Fatalf("browser: Chromium (%s) did not start within %v", path, DefaultTimeout)
	}
	if err != nil {
		t.Fatalf("browser: starting Chromium (%s): %v", path, err)
	}
	// Listen only sees events after it returns; the tab is still blank here,
	// so nothing a test page does can be missed.
	if err := chromedp.Listen(ctx, b.onEvent); err != nil {
		t.Fatalf("browser: listening to the tab: %v", err)
	}
	return b
}

// findChromium returns the browser to launch: EnvChromium if set, else the
// Debian path, else the first known name in PATH.
func findChromium() (string, error) {
	const install = "install Chromium (Debian: apt-get install chromium) or set " + EnvChromium + " to its path"
	if p := os.Getenv(EnvChromium); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%s=%s: %v; %s", EnvChromium, p, err, install)
		}
		return p, nil
	}
	if _, err := exec.LookPath(defaultChromium); err == nil {
		return defaultChromium, nil
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found (tried %s, %s and %v in PATH); %s", EnvChromium, defaultChromium, chromiumNames, install)
}

// onEvent records the errors the page reports. It runs on the goroutine that
// reads the browser's messages, so it must only take a lock and append.
func (b *Browser) onEvent(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = exceptionText(ev.ExceptionDetails)
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		msg = "console.error: " + argsText(ev.Args)
	default:
		return
	}
	b.mu.Lock()
	b.errors = append(b.errors, msg)
	b.mu.Unlock()
}

// ConsoleErrors returns the uncaught JavaScript exceptions and console.error
// messages of every page loaded since Start, oldest first, so a test can
// assert that a page threw nothing. Warnings, logs and failed resource loads
// are not included.
func (b *Browser) ConsoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// call runs a bounded by the per-call timeout and names the step in the
// error, so a failing test says which call of which selector hung.
func call[T any](b *Browser, what string, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout())
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		return v, fmt.Errorf("browser: %s: %w", what, err)
	}
	return v, nil
}

// timeout is the bound of one call: Timeout, or DefaultTimeout when unset.
func (b *Browser) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return DefaultTimeout
}
