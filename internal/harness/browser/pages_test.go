package browser

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// pages are the test pages, by path. Each is tiny and self-contained: no
// external scripts, styles or fonts, so nothing leaves the machine.
var pages = map[string]string{
	"/": `<!doctype html><title>Home</title>
<h1 id="main">Hello, browser</h1>
<p id="hidden" style="display:none">secret</p>`,

	"/late": `<!doctype html><title>Late</title>
<p id="status">loading</p>
<script>setTimeout(() => { document.getElementById("status").textContent = "ready: 3 leases"; }, 300);</script>`,

	"/click": `<!doctype html><title>Click</title>
<button id="go" onclick="this.nextElementSibling.textContent = 'clicked ' + (++window.clicks)">Go</button><span id="out">not clicked</span>
<script>window.clicks = 0;</script>`,

	"/structure": `<!doctype html><title>Structure</title>
<main id="app" data-role="console" class="dark">
  <header data-role="header"><h1>Leases</h1><span class="muted">3 held</span></header>
  <div class="wrapper"><section>
    <table id="leases">
      <thead><tr data-role="head"><th>Key</th><th>Owner</th></tr></thead>
      <tbody>
        <tr data-role="row"><td data-role="key">a</td><td data-role="owner">me</td></tr>
        <tr data-role="row"><td data-role="key">b</td><td data-role="owner">you</td></tr>
        <tr data-role="row" style="color:red"><td data-role="key">c</td><td data-role="owner">me</td></tr>
      </tbody>
    </table>
  </section></div>
  <ul id="nav">
    <li data-role="item">one</li>
    <li data-role="item">two</li>
    <li data-role="item"><a data-role="link" href="#">three</a></li>
  </ul>
  <footer data-role="footer">v1</footer>
</main>
<p id="outside">not under the root</p>`,

	"/tall": `<!doctype html><title>Tall</title>
<body style="margin:0"><div style="height:3000px;background:linear-gradient(#fff,#00f)">tall</div></body>`,

	"/phone": `<!doctype html><title>Phone</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><p>phone</p>`,

	"/throws": `<!doctype html><title>Throws</title>
<script>
console.log("this is fine");
console.warn("so is this");
console.error("bad thing", 42);
throw new Error("boom");
</script>`,
}

// serve starts a server for pages that lives as long as the test.
func serve(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return srv
}
