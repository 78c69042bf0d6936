package console

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// TokenHeader carries the actions token. A custom header cannot be sent
// by a plain cross-site form, so a page elsewhere cannot forge an action
// even when the browser holds no token at all.
const TokenHeader = "X-Tenure-Token"

// Handler serves the page at /, its files under /console/, the snapshot
// at /console/api/state, the live stream at /console/api/stream and the
// actions at /console/api/action. Other paths are not its own: mount it
// for "GET /" and "/console/" on a mux that serves the rest.
func (c *Console) Handler() http.Handler {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	index, _ := fs.ReadFile(static, "index.html")
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		// Written out: a file server redirects /index.html to the
		// directory, which is this very path.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
	mux.Handle("GET /console/", http.StripPrefix("/console", files))
	mux.HandleFunc("GET /console/api/state", c.serveState)
	mux.HandleFunc("GET /console/api/stream", c.serveStream)
	mux.HandleFunc("POST /console/api/action", c.serveAction)
	return HostGuard(securityHeaders(mux), c.cfg.Public)
}

// HostGuard refuses requests for a Host that is not this host's (unless
// public): a web page elsewhere could otherwise point a name of its own
// at 127.0.0.1 and read what is served there (DNS rebinding).
func HostGuard(next http.Handler, public bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !public && !localHost(r.Host) {
			http.Error(w, "this server answers only for localhost and loopback addresses (see --http-public)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// securityHeaders keeps the page from being framed or from loading
// anything but its own files.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// localHost reports whether a Host header names this host.
func localHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Console) serveState(w http.ResponseWriter, r *http.Request) {
	snap := c.fresh(r.Context())
	if snap == nil {
		http.Error(w, "the store has not been read yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(snap)
}

const (
	// streamPing keeps an idle stream open through proxies that close
	// silent connections.
	streamPing = 15 * time.Second
	// writeWait bounds each write to a stream: a client that stopped
	// reading is dropped rather than holding a goroutine and a snapshot.
	writeWait = 10 * time.Second
	// maxStreams bounds the pages open at once.
	maxStreams = 64
)

// serveStream sends every snapshot as a server-sent event, the current
// one first.
func (c *Console) serveStream(w http.ResponseWriter, r *http.Request) {
	if c.streams.Add(1) > maxStreams {
		c.streams.Add(-1)
		http.Error(w, "too many open consoles", http.StatusServiceUnavailable)
		return
	}
	defer c.streams.Add(-1)
	c.readSoon() // an on-demand console starts reading now
	rc := http.NewResponseController(w)
	write := func(b []byte) error {
		if err := rc.SetWriteDeadline(time.Now().Add(writeWait)); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if write(nil) != nil {
		return
	}
	var sent uint64
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		frame, version, changed := c.currentFrame()
		if frame != nil && version != sent {
			if write(frame) != nil {
				return
			}
			sent = version
		}
		select {
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		case <-changed:
		case <-ping.C:
			if write([]byte(": ping\n\n")) != nil {
				return
			}
		}
	}
}

// action is an action request.
type action struct {
	Op  string `json:"op"` // move, pause, resume, release
	Key string `json:"key"`
	To  string `json:"to,omitempty"` // move: the replica to move to, "" for any other
}

func (c *Console) serveAction(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		field := "message"
		if code != http.StatusOK {
			field = "error"
		}
		_ = json.NewEncoder(w).Encode(map[string]string{field: msg})
	}
	if !c.cfg.Actions {
		reply(http.StatusForbidden, "actions are off: start the console with --allow-actions")
		return
	}
	got := r.Header.Get(TokenHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(c.cfg.Token)) != 1 {
		reply(http.StatusUnauthorized, "a missing or wrong token: open the console with the address it printed at start")
		return
	}
	var a action
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&a); err != nil {
		reply(http.StatusBadRequest, "the request is not an action: "+err.Error())
		return
	}
	msg, err := c.act(r.Context(), a)
	var bad badAction
	switch {
	case errors.As(err, &bad):
		reply(http.StatusBadRequest, err.Error())
	case err != nil:
		reply(http.StatusBadGateway, err.Error())
	default:
		c.readSoon()
		reply(http.StatusOK, msg)
	}
}
