package main_test

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/browser"
)

// TestConsoleInABrowser opens tenure console in a real headless Chromium,
// on a PostgreSQL store whose URL carries a password: the page shows a
// key held by another process, follows a takeover when that process is
// killed (a handoff with cause "expired"), and shows a pool's workers
// with their keys; nothing of the page or its data shows the password;
// the page's outline matches testdata/console.outline (structure, not
// pixels); and the page fits a phone's width.
//
// TENURE_CONSOLE_SCREENSHOT=path.png keeps a screenshot there.
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tenure processes and a browser")
	}
	b := browser.Start(t)
	storeURL, password := withPassword(t, postgresTable(t, "cli_console"))
	common := []string{"--store", storeURL, "--ttl", "2s", "--grace", "1s", "--stop-timeout", "500ms"}

	a := start(t, nil, append([]string{"run", "--key", "job", "--owner", "replica-a"}, append(common, "--", "sleep", "1000")...)...)
	waitOutput(t, a, "acquired lease", 30*time.Second) // the lease table exists: console only reads
	con := start(t, nil, "console", "--store", storeURL, "--http", "127.0.0.1:0", "--grace", "1s")
	page := consoleURL(t, con)

	if err := b.Navigate(page); err != nil {
		t.Fatal(err)
	}
	owner := `tr[data-key="job"] [data-role=owner]`
	if err := b.WaitText(owner, "replica-a", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitText(`#store`, "postgres://", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	start(t, nil, append([]string{"run", "--key", "job", "--owner", "replica-b"}, append(common, "--", "sleep", "1000")...)...)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitText(owner, "replica-b", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitText(`#handoff-rows`, "expired", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		start(t, nil, append([]string{"pool", "--name", "mail", "--keys", "k1,k2,k3,k4"}, append(common, "--", "sleep", "1000")...)...)
	}
	var held int
	deadline := time.Now().Add(40 * time.Second)
	for held != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool's workers hold %d of 4 keys on the page", held)
		}
		if err := b.Eval(`[...document.querySelectorAll('[data-pool="mail"] [data-role=worker]:not(.gone) [data-role=held]')]
			.reduce((n, e) => n + parseInt(e.textContent, 10), 0)`, &held); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the page redraws once a second
	}

	checkOutline(t, b)
	if shot := os.Getenv("TENURE_CONSOLE_SCREENSHOT"); shot != "" {
		if err := b.Screenshot(shot); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", shot)
	}

	// Nothing shown or sent names the password.
	var text string
	if err := b.Eval(`document.documentElement.outerHTML`, &text); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, password) || strings.Contains(fetch(t, page+"console/api/state"), password) {
		t.Error("the console shows the store's password")
	}

	// A phone: nothing wider than the screen but the tables, which scroll.
	if err := b.SetViewport(390, 844, true); err != nil {
		t.Fatal(err)
	}
	var wide int
	if err := b.Eval(`document.documentElement.scrollWidth`, &wide); err != nil {
		t.Fatal(err)
	}
	if wide > 390 {
		t.Errorf("on a 390px wide phone the page is %dpx wide", wide)
	}
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}

	// Ctrl-C with the page open: the console ends its stream and exits 0
	// (TestStreamsEndWhenTheConsoleStops shows the stream ends).
	if err := con.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := con.wait(t, 10*time.Second); code != 0 {
		t.Errorf("tenure console exited %d on SIGINT, want 0", code)
	}
}

// checkOutline compares the page's outline with the golden file;
// TENURE_UPDATE_GOLDEN=1 rewrites it.
func checkOutline(t *testing.T, b *browser.Browser) {
	t.Helper()
	got, err := b.Structure("body")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "console.outline")
	if os.Getenv("TENURE_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("the page's outline changed (TENURE_UPDATE_GOLDEN=1 rewrites %s):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

// withPassword returns rawURL with a password, and the password: the
// URL's own, or one added (the test server trusts every connection).
func withPassword(t *testing.T, rawURL string) (string, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if pw, ok := u.User.Password(); ok {
		return rawURL, pw
	}
	const pw = "console-s3cret-pw"
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String(), pw
}

// consoleURL reads the address tenure console prints at start.
func consoleURL(t *testing.T, p *proc) string {
	t.Helper()
	waitOutput(t, p, "open http://", 30*time.Second)
	return regexp.MustCompile(`open (http://\S+/)`).FindStringSubmatch(p.out.String())[1]
}

func fetch(t *testing.T, u string) string {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(bufio.NewReader(res.Body))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
