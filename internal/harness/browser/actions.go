package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// waitTextInterval is how often WaitText reads the element's text. Short
// enough that a test barely waits past the change, long enough that polling
// costs nothing next to the page's own work.
const waitTextInterval = 25 * time.Millisecond

// Navigate loads url in the tab and returns once the page's load event has
// fired, so its inline scripts have run. A page that fails to load (refused
// connection, bad address) is an error; an HTTP error status is not.
func (b *Browser) Navigate(url string) error {
	_, err := call(b, "navigate to "+url, chromedp.Navigate(url))
	return err
}

// WaitVisible waits until the first element matching the CSS selector exists
// and has a layout box, for pages that build themselves after load.
func (b *Browser) WaitVisible(selector string) error {
	_, err := call(b, "wait for "+selector+" to be visible", chromedp.WaitVisible(chromedp.CSS(selector)))
	return err
}

// WaitText waits until the textContent of the first element matching the CSS
// selector contains substring, for text that a script changes after load. A
// timeout of zero or less means the Browser's per-call timeout. On timeout the
// error holds the last text seen, which is usually what a failing test needs.
//
// It polls from Go rather than in the page, so it keeps working across a
// navigation and an element that appears late.
func (b *Browser) WaitText(selector, substring string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = b.timeout()
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	tick := time.NewTicker(waitTextInterval)
	defer tick.Stop()
	last := "no element matched"
	for {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[*string](textJS(selector)))
		switch {
		case err == nil && text != nil && strings.Contains(*text, substring):
			return nil
		case err == nil && text != nil:
			last = fmt.Sprintf("last text %q", *text)
		case err == nil:
			last = "no element matched"
		case ctx.Err() == nil:
			// The page is between documents or the script failed; the next
			// tick may see the new page.
			last = "last error: " + err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("browser: %s did not contain %q within %v (%s)", selector, substring, timeout, last)
		case <-tick.C:
		}
	}
}

// Text returns the textContent of the first element matching the CSS
// selector: the text of the element and its descendants, hidden ones too, as
// WaitText sees it. It does not wait; an element that is not there is an
// error at once, so use WaitVisible or WaitText first on a page that builds
// itself.
func (b *Browser) Text(selector string) (string, error) {
	text, err := call(b, "read the text of "+selector, chromedp.Evaluate[*string](textJS(selector)))
	if err != nil {
		return "", err
	}
	if text == nil {
		return "", fmt.Errorf("browser: read the text of %s: no element matches", selector)
	}
	return *text, nil
}

// textJS is an expression giving the textContent of the first element
// matching selector, or null when none does.
func textJS(selector string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e === null ? null : e.textContent; })()`, jsString(selector))
}

// Eval evaluates the JavaScript expression in the page and decodes its
// result, as JSON, into out; out may be nil to ignore the result. A promise
// is awaited, so `fetch(...).then(r => r.status)` works. A thrown exception
// and an undefined result (when out is not nil) are errors.
func (b *Browser) Eval(js string, out any) error {
	raw, err := call(b, "evaluate "+shorten(js), chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
	if err != nil || out == nil {
		return err
	}
	if len(raw) == 0 {
		return fmt.Errorf("browser: evaluate %s: the result is undefined", shorten(js))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("browser: evaluate %s: decoding %s: %w", shorten(js), shorten(string(raw)), err)
	}
	return nil
}

// Click clicks the middle of the first element matching the CSS selector
// with real mouse events, after waiting for it to be visible, so handlers
// run as they would for a person and a covered or hidden element fails.
func (b *Browser) Click(selector string) error {
	_, err := call(b, "click "+selector, chromedp.Click(chromedp.CSS(selector)))
	return err
}

// SetViewport makes the tab's viewport width×height CSS pixels. With mobile
// set it also emulates a phone (touch, mobile layout, portrait when taller
// than wide); a page then needs <meta name="viewport"
// content="width=device-width"> for window.innerWidth to be width, as on a
// real phone.
func (b *Browser) SetViewport(width, height int, mobile bool) error {
	var opts []chromedp.EmulateViewportOption
	if mobile {
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
		if height >= width {
			opts = append(opts, chromedp.EmulatePortrait)
		}
	}
	what := fmt.Sprintf("set the viewport to %dx%d", width, height)
	_, err := call(b, what, chromedp.EmulateViewport(int64(width), int64(height), opts...))
	return err
}

// Screenshot writes a PNG of the whole page, beyond the viewport, to path,
// for a person to look at when a test fails. Do not compare its pixels;
// compare Structure.
func (b *Browser) Screenshot(path string) error {
	png, err := call(b, "take a screenshot", chromedp.FullScreenshot(100))
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return fmt.Errorf("browser: writing the screenshot: %w", err)
	}
	return nil
}

// jsString quotes s as a JavaScript string literal; JSON strings are valid
// JavaScript, so a selector with quotes cannot break out of the script.
func jsString(s string) string {
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}

// shorten keeps error messages readable when the script is long.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// exceptionText renders an uncaught exception as the DevTools console
// does: "Uncaught Error: boom", without the stack.
func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "Uncaught exception"
	}
	text := d.Text
	if obj := d.Exception; obj != nil {
		desc, _, _ := strings.Cut(valueText(obj), "\n")
		text = strings.TrimSpace(text + " " + desc)
	}
	return text
}

// argsText joins console arguments as the console shows them: strings bare,
// other values by their description.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		parts = append(parts, valueText(a))
	}
	return strings.Join(parts, " ")
}

func valueText(o *runtime.RemoteObject) string {
	switch {
	case o == nil:
		return ""
	case o.Description != "":
		return o.Description
	case o.UnserializableValue != "":
		return string(o.UnserializableValue)
	case len(o.Value) > 0:
		var s string
		if json.Unmarshal(o.Value, &s) == nil {
			return s
		}
		return string(o.Value)
	}
	return string(o.Type)
}
