package console

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
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
	return c.guard(mux)
}

// guard refuses requests for a Host that is not this host's (unless
// Public), and sets the headers that keep the page from being framed or
// from loading anything but its own files.
func (c *Console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.cfg.Public && !localHost(r.Host) {
			http.Error(w, "this console answers only for localhost and loopback addresses (see --http-public)", http.StatusMisdirectedRequest)
			return
		}
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

func (c *Console) serveState(w http.ResponseWriter, _ *http.Request) {
	snap, _, _ := c.current()
	if snap == nil {
		http.Error(w, "the store has not been read yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(snap)
}

// streamPing keeps an idle stream open through proxies that close silent
// connections.
const streamPing = 15 * time.Second

// serveStream sends every snapshot as a server-sent event, the current
// one first.
func (c *Console) serveStream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	var sent uint64
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		snap, version, changed := c.current()
		if snap != nil && version != sent {
			if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", snap); err != nil {
				return
			}
			flusher.Flush()
			sent = version
		}
		select {
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		case <-changed:
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
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
