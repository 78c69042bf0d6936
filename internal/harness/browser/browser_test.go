package browser

import (
	"bytes"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNavigateLoadsThePageAndReportsAPageThatCannotLoad(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/"); err != nil {
		t.Fatal(err)
	}
	var title string
	if err := b.Eval("document.title", &title); err != nil || title != "Home" {
		t.Fatalf("title = %q, %v; want Home", title, err)
	}
	if err := b.WaitVisible("#main"); err != nil {
		t.Fatal(err)
	}
	if text, err := b.Text("#main"); err != nil || text != "Hello, browser" {
		t.Fatalf("Text(#main) = %q, %v; want Hello, browser", text, err)
	}
	if text, err := b.Text("#missing"); err == nil {
		t.Fatalf("Text(#missing) = %q, want an error", text)
	}

	// A hidden element never becomes visible; a short timeout proves that
	// WaitVisible checks visibility rather than presence, and gives up.
	b.Timeout = 500 * time.Millisecond
	if err := b.WaitVisible("#hidden"); err == nil {
		t.Fatal("WaitVisible(#hidden) succeeded on a display:none element")
	}
	b.Timeout = 0

	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if err := b.Navigate(dead.URL + "/"); err == nil {
		t.Fatal("Navigate to a closed server succeeded")
	}
}

func TestWaitTextSeesTextThatAScriptChangesLater(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/late"); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitText("#status", "ready", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if text, err := b.Text("#status"); err != nil || text != "ready: 3 leases" {
		t.Fatalf("after WaitText, Text(#status) = %q, %v; want the changed text", text, err)
	}

	err := b.WaitText("#status", "never", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), `"ready: 3 leases"`) {
		t.Fatalf("WaitText for a text that never comes = %v; want an error with the last text seen", err)
	}
	err = b.WaitText("#missing", "x", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no element matched") {
		t.Fatalf("WaitText on a missing element = %v; want an error saying no element matched", err)
	}
}

func TestClickRunsThePageHandler(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/click"); err != nil {
		t.Fatal(err)
	}
	if text, err := b.Text("#out"); err != nil || text != "not clicked" {
		t.Fatalf("before the click, Text(#out) = %q, %v", text, err)
	}
	if err := b.Click("#go"); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitText("#out", "clicked 1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var clicks int
	if err := b.Eval("window.clicks", &clicks); err != nil || clicks != 1 {
		t.Fatalf("window.clicks = %d, %v; want exactly 1 click", clicks, err)
	}
}

func TestStructureOutlinesTheNamedPartsAndFoldsRepeatedRows(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/structure"); err != nil {
		t.Fatal(err)
	}
	const want = `main#app[role=console]
  header[role=header]
  table#leases
    tr[role=head]
    tr[role=row] ×N
      td[role=key]
      td[role=owner]
  ul#nav
    li[role=item] ×N
    li[role=item]
      a[role=link]
  footer[role=footer]
`
	got, err := b.Structure("#app")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Structure(#app) =\n%s\nwant\n%s", got, want)
	}

	// Forty more rows, with other text and classes, change nothing.
	const addRows = `(() => {
		const body = document.querySelector("#leases tbody");
		for (let i = 0; i < 40; i++) {
			const tr = body.rows[0].cloneNode(true);
			tr.className = "new";
			tr.cells[0].textContent = "k" + i;
			body.appendChild(tr);
		}
		return body.rows.length;
	})()`
	var rows int
	if err := b.Eval(addRows, &rows); err != nil || rows != 43 {
		t.Fatalf("adding rows: %d rows, %v", rows, err)
	}
	if got, err := b.Structure("#app"); err != nil || got != want {
		t.Fatalf("with 43 rows, Structure(#app) =\n%s\n(%v), want it unchanged", got, err)
	}

	if got, err := b.Structure("#nope"); err == nil {
		t.Fatalf("Structure(#nope) = %q, want an error", got)
	}
}

func TestScreenshotWritesAFullPagePNG(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/tall"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "page.png")
	if err := b.Screenshot(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("the screenshot (%d bytes) does not start with the PNG signature", len(data))
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// The page is 3000 px tall and the window 900: a viewport-only shot
	// would be 900 high.
	if cfg.Height < 3000 {
		t.Fatalf("the screenshot is %dx%d, want the full 3000 px tall page", cfg.Width, cfg.Height)
	}
}

func TestSetViewportEmulatesAPhone(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/phone"); err != nil {
		t.Fatal(err)
	}
	var width int
	if err := b.Eval("window.innerWidth", &width); err != nil || width != 1280 {
		t.Fatalf("before SetViewport, innerWidth = %d, %v; want the 1280 px window", width, err)
	}
	if err := b.SetViewport(390, 844, true); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Width  int  `json:"width"`
		Height int  `json:"height"`
		Touch  bool `json:"touch"`
	}
	if err := b.Eval(`({width: window.innerWidth, height: window.innerHeight, touch: navigator.maxTouchPoints > 0})`, &got); err != nil {
		t.Fatal(err)
	}
	if got.Width != 390 || got.Height != 844 || !got.Touch {
		t.Fatalf("after SetViewport(390, 844, true): %+v; want 390x844 with touch", got)
	}
}

func TestConsoleErrorsCatchesExceptionsAndConsoleErrorOnly(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/"); err != nil {
		t.Fatal(err)
	}
	if errs := b.ConsoleErrors(); len(errs) != 0 {
		t.Fatalf("a clean page gave console errors %q", errs)
	}
	if err := b.Navigate(srv.URL + "/throws"); err != nil {
		t.Fatal(err)
	}
	// The script throws while the page parses, before its load event, and
	// the browser sends events in order, so Navigate returning means both
	// errors have been seen.
	errs := b.ConsoleErrors()
	if len(errs) != 2 ||
		!strings.Contains(errs[0], "bad thing 42") ||
		!strings.Contains(errs[1], "Error: boom") {
		t.Fatalf("ConsoleErrors() = %q; want the console.error and the thrown Error, not the log or the warning", errs)
	}
}

func TestEvalDecodesResultsAndReportsExceptions(t *testing.T) {
	srv := serve(t)
	b := Start(t)
	if err := b.Navigate(srv.URL + "/"); err != nil {
		t.Fatal(err)
	}
	var got struct {
		N    int      `json:"n"`
		List []string `json:"list"`
	}
	if err := b.Eval(`Promise.resolve({n: 6 * 7, list: ["a", "b"]})`, &got); err != nil {
		t.Fatal(err)
	}
	if got.N != 42 || strings.Join(got.List, ",") != "a,b" {
		t.Fatalf("Eval = %+v, want {42 [a b]}", got)
	}
	if err := b.Eval(`(() => { throw new Error("nope") })()`, nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("Eval of a throwing script = %v, want an error naming it", err)
	}
	var n int
	if err := b.Eval(`undefined`, &n); err == nil {
		t.Fatal("Eval of undefined into an int succeeded")
	}
}
