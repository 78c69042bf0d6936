package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// On a network slow enough that opening a connection takes longer than
// one call may (a MySQL connection is a greeting, authentication and a
// session variable: 3–4 round trips), a store whose other calls keep its
// one warm connection busy must still renew: the ten-minute MySQL run lost
// a replica's keys 14 times in one slow-store window, every renewal waiting
// on a connection that was never allowed to finish opening.
func TestRenewalsFindAConnectionOnASlowNetwork(t *testing.T) {
	for _, s := range []struct {
		kind   string
		server testenv.Server
	}{{kindMySQL, testenv.MySQL}, {kindPostgres, testenv.Postgres}} {
		t.Run(s.kind, func(t *testing.T) {
			b := scratchBackend(t, s.server.URL(t))
			st, ps := viaProxies(t, b)
			peer, _ := viaProxies(t, b)
			ctx := t.Context()
			key := func(i int) string { return fmt.Sprintf("slowpool/k%02d", i) }
			var items []store.RenewItem
			for i := range 5 {
				r, err := st.Acquire(ctx, store.AcquireRequest{Key: key(i), Owner: "o", TTL: 20 * time.Second, Grace: time.Second, Running: true})
				if err != nil || !r.Acquired {
					t.Fatalf("acquire: %+v %v", r, err)
				}
				items = append(items, store.RenewItem{Key: key(i), Epoch: r.Epoch, Running: true})
			}
			for i := 5; i < 16; i++ {
				if _, err := peer.Acquire(ctx, store.AcquireRequest{Key: key(i), Owner: "p", TTL: time.Minute, Grace: time.Second, Running: true}); err != nil {
					t.Fatal(err)
				}
			}
			// 47 ms each way: a call's round trip answers well within the
			// 300 ms a call may take, a fresh connection does not.
			ps.SetDelay(47 * time.Millisecond)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { // the acquisition pass, retrying keys the peer holds
				for {
					for i := 5; i < 16; i++ {
						select {
						case <-stop:
							return
						default:
						}
						cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
						_, _ = st.Acquire(cctx, store.AcquireRequest{Key: key(i), Owner: "o", TTL: 2 * time.Second, Grace: time.Second})
						cancel()
					}
				}
			})
			const renewals = 20
			failed := 0
			for range renewals {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				began := time.Now()
				if _, err := st.Renew(cctx, "o", 20*time.Second, items); err != nil {
					failed++
					t.Logf("renewal failed after %v: %v", time.Since(began).Round(time.Millisecond), err)
				}
				cancel()
				time.Sleep(300 * time.Millisecond)
			}
			close(stop)
			wg.Wait()
			// The first renewals may wait for the second connection to
			// open, and on a loaded two-core machine under -race a call
			// now and then misses 300 ms on scheduling alone (4 of 12 did
			// once in CI). Without a connection of their own, 11 of 12
			// failed: a quarter tells the two apart with room to spare.
			if failed > renewals/4 {
				t.Fatalf("%d of %d renewals failed on a network that answers each call within its timeout", failed, renewals)
			}
		})
	}
}
