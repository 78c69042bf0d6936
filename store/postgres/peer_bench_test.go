package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

// Tenure side by side with PostgreSQL's advisory locks, the fastest peer
// on PostgreSQL, in one run:
//
//	go test -run '^$' -bench 'HandoffVersusAdvisoryLocks' -benchtime 300x ./store/postgres/
//
// Each iteration a holder gives a key up and a waiting peer takes it,
// timed from the release to the peer holding it: Store.Release → the
// peer's Watch event (LISTEN/NOTIFY) → Store.Acquire, against
// pg_advisory_unlock → the peer's blocked pg_advisory_lock returning.
// Advisory locks write nothing (no epoch survives them, and a holder cut
// off keeps its lock until the server notices), so they are the floor.
func BenchmarkHandoffVersusAdvisoryLocks(b *testing.B) {
	b.Run("tenure", func(b *testing.B) {
		s := tables.New(b)
		peer := tables.OpenTable(b, s.table, false)
		stores := [2]*Store{s, peer}
		owners := [2]string{"a", "b"}
		ctx := context.Background()
		events := [2]<-chan store.Event{}
		for i, st := range stores {
			ch, err := st.Watch(ctx, "job")
			if err != nil {
				b.Fatal(err)
			}
			events[i] = ch
		}
		req := func(i int) store.AcquireRequest {
			return store.AcquireRequest{Key: "job", Owner: owners[i], TTL: time.Minute, Grace: time.Second}
		}
		res, err := s.Acquire(ctx, req(0))
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		epoch, holder := res.Epoch, 0
		var took []time.Duration
		for b.Loop() {
			waiter := 1 - holder
			start := time.Now()
			if err := stores[holder].Release(ctx, owners[holder], []store.Term{{Key: "job", Epoch: epoch}}); err != nil {
				b.Fatal(err)
			}
			for ev := range events[waiter] {
				if ev.Kind == store.Released && ev.Epoch == epoch {
					break
				}
			}
			res, err := stores[waiter].Acquire(ctx, req(waiter))
			if err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			took = append(took, time.Since(start))
			epoch, holder = res.Epoch, waiter
		}
		storetest.ReportQuantiles(b, took)
	})
	b.Run("advisory-lock", func(b *testing.B) {
		s := tables.New(b)
		ctx := context.Background()
		var conns [2]*pgx.Conn
		for i := range conns {
			c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			conns[i] = c
		}
		const lock = 4242
		if _, err := conns[0].Exec(ctx, "SELECT pg_advisory_lock($1)", lock); err != nil {
			b.Fatal(err)
		}
		holder := 0
		var took []time.Duration
		for b.Loop() {
			waiter := 1 - holder
			got := make(chan error, 1)
			go func() {
				_, err := conns[waiter].Exec(ctx, "SELECT pg_advisory_lock($1)", lock)
				got <- err
			}()
			waitForLockWaiter(b, s, lock)
			start := time.Now()
			if _, err := conns[holder].Exec(ctx, "SELECT pg_advisory_unlock($1)", lock); err != nil {
				b.Fatal(err)
			}
			if err := <-got; err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
			holder = waiter
		}
		storetest.ReportQuantiles(b, took)
	})
}

// waitForLockWaiter waits until a session waits for advisory lock id, so
// the unlock is heard by a peer already blocked.
func waitForLockWaiter(b *testing.B, s *Store, id int64) {
	b.Helper()
	for {
		var waiting bool
		err := s.pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted)`, id).Scan(&waiting)
		if err != nil {
			b.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
