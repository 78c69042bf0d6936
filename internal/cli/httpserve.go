package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	tmetrics "github.com/tenure-dev/tenure/metrics"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/console"
	"github.com/tenure-dev/tenure/store"
)

// checkListenAddr refuses an --http address beyond loopback unless
// --http-public says so: /status names every holder, and nothing here
// authenticates.
func checkListenAddr(addr string, public bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return usagef("--http %q: want HOST:PORT, such as 127.0.0.1:9090", addr)
	}
	if public {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	where := host
	if where == "" {
		where = "every interface"
	}
	return usagef("--http %s would listen on %s, beyond this host; use 127.0.0.1:%s, or pass --http-public to expose it", addr, where, port)
}

// statusDoc is the /status document.
type statusDoc struct {
	Owner string             `json:"owner"`
	Keys  []tenure.KeyStatus `json:"keys"`
	// Pools is set by tenure pool: the keys, this replica's share and the
	// keys each live worker holds.
	Pools       []tenure.PoolStatus `json:"pools,omitempty"`
	Leases      []leaseView         `json:"leases"`
	LeasesError string              `json:"leases_error,omitempty"`
}

type httpServer struct {
	srv  *http.Server
	done chan struct{}
}

// startHTTP listens on addr and serves /metrics, /status, /healthz and
// /readyz, and the web console (con) at / and under /console/. ready,
// when set, is what else the command needs to be ready.
func startHTTP(addr string, public bool, sup *tenure.Supervisor, st store.Store, secrets []string, metrics *tmetrics.Collector, ready func() error,
	con http.Handler, log *slog.Logger,
) (*httpServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /{$}", con)
	mux.Handle("/console/", con)
	// /healthz: the process is alive and its loop turns (restart it if
	// not); /readyz: it can do its job now (take it out of rotation if
	// not). A store outage fails /readyz only: restarting every replica
	// would not bring the store back.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		probe(w, sup.Live(), secrets)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		err := sup.Ready()
		if err == nil && ready != nil {
			err = ready()
		}
		probe(w, err, secrets)
	})
	callTimeout := sup.Config().CallTimeout
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		doc := statusDoc{Owner: sup.Owner(), Keys: sup.Status(), Pools: sup.Pools(), Leases: []leaseView{}}
		ctx, cancel := context.WithTimeout(r.Context(), max(callTimeout, time.Second))
		leases, err := st.List(ctx, sup.Config().Prefix)
		cancel()
		if err != nil {
			doc.LeasesError = store.RedactString(err.Error(), secrets...)
		} else {
			doc.Leases = viewLeases(leases)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	h := &httpServer{
		// /status names every holder as the console does: both answer
		// only for this host's names unless public (DNS rebinding).
		srv:  &http.Server{Handler: console.HostGuard(mux, public), ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	log.Info("serving /metrics, /status, /healthz and /readyz", "addr", ln.Addr().String(), "console", "http://"+ln.Addr().String()+"/")
	return h, nil
}

// probe answers a health probe: 200 "ok", or 503 and why.
func probe(w http.ResponseWriter, err error, secrets []string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, store.RedactString(err.Error(), secrets...))
		return
	}
	fmt.Fprintln(w, "ok")
}

func (h *httpServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	<-h.done
}
