package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/cli/storeurl"
	"github.com/tenure-dev/tenure/internal/console"
)

func (e *env) consoleCommand() *cobra.Command {
	var addr, prefix string
	var public, actions bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "console [--store URL] [--http 127.0.0.1:9800] [--allow-actions] [--prefix P]",
		Short: "Serve a live web console of every lease, pool and handoff",
		Long: `console serves a web page that shows the store live: every key with its
holder, epoch, whether its command runs, and its time left drawn against
the TTL and the grace; paused, cooling and moving keys; each pool's
workers with the keys they hold against their fair share and cap; and a
timeline of the handoffs it has seen, with their causes (released,
expired, revoked, moved, crash-loop). The page updates itself once a
second. tenure run and tenure pool serve the same page at / of --http.

The console only reads, and never creates a store, unless --allow-actions:
then the page also moves, pauses, resumes and releases keys, as the
commands of those names do, for requests that carry the token printed at
start (in the address to open; the page keeps it for its tab). The token
is new at every start.

Like --http elsewhere, the address must be on this host (loopback) unless
--http-public; the console then also answers only for Host names of this
host, so a web page elsewhere cannot reach it through its own domain name.
Nothing on the page needs the network beyond the console: no CDN, no
fonts. The store's password is never shown.

` + exitCodesHelp,
		Example: `  tenure console
  tenure console --store postgres://tenure@db/ops --http 127.0.0.1:9800
  tenure console --store redis://cache:6379/0 --allow-actions`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkListenAddr(addr, public); err != nil {
				return err
			}
			if grace <= 0 {
				return usagef("--grace %v: want a positive duration", grace)
			}
			raw, _ := cmd.Flags().GetString("store")
			spec, err := e.parseStore(raw)
			if err != nil {
				return err
			}
			log, err := e.logger(cmd, spec.Secrets)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			open := storeurl.OpenReadOnly
			if actions {
				open = storeurl.OpenSpec
			}
			openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			st, err := e.openStore(openCtx, spec, open)
			cancel()
			if err != nil {
				return err
			}
			defer st.Close()
			cfg := console.Config{Store: st, Prefix: prefix, StoreShown: spec.Shown, Version: versionString(),
				Secrets: spec.Secrets, Grace: grace, Actions: actions, Public: public, Log: log}
			if actions {
				if cfg.Token, err = newToken(); err != nil {
					return withCode(ExitFailure, err)
				}
				if public {
					log.Warn("--allow-actions with --http-public: the token crosses the network unencrypted; put the console behind a TLS proxy")
				}
			}
			con := console.New(cfg)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return withCode(ExitFailure, fmt.Errorf("--http: %w", err))
			}
			srv := &http.Server{Handler: con.Handler(), ReadHeaderTimeout: 10 * time.Second}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			runDone := make(chan struct{})
			go func() { defer close(runDone); con.Run(ctx) }()
			where := "http://" + ln.Addr().String() + "/"
			if actions {
				where += "#token=" + cfg.Token
			}
			fmt.Fprintf(e.stdout, "tenure console for %s: open %s\n", spec.Shown, where)
			select {
			case <-ctx.Done():
			case err := <-served:
				return withCode(ExitFailure, fmt.Errorf("the console stopped serving: %w", err))
			}
			<-runDone // the streams have ended
			shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutCtx); err != nil {
				// A request still open (an action waiting on the store, a
				// client that stopped reading) is cut: the operator asked
				// the console to stop.
				_ = srv.Close()
			}
			return nil
		},
	}
	addStoreFlag(cmd)
	cmd.Flags().StringVar(&addr, "http", "127.0.0.1:9800", "the address to serve the console on (loopback only unless --http-public)")
	cmd.Flags().BoolVar(&public, "http-public", false, "allow --http on a non-loopback address, and any Host name")
	cmd.Flags().BoolVar(&actions, "allow-actions", false, "let the page move, pause, resume and release keys (with the token printed at start)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "show only keys that start with this prefix")
	cmd.Flags().DurationVar(&grace, "grace", tenure.DefaultGrace, "the grace the replicas use, drawn after each lease's expiry (the store does not record it)")
	return cmd
}

// newToken is a fresh actions token: 128 random bits, in hex.
func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making the actions token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
