package chaos

import (
	"context"
	"sync"
	"testing"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// resourceFor prepares and opens the resource a run on the store at raw
// would write to, dropped when the test ends.
func resourceFor(t *testing.T, raw string) resource {
	t.Helper()
	b := scratchBackend(t, raw)
	rs := newResourceSpec(b, testenv.UniqueName("t"), t.TempDir(), true)
	ctx := t.Context()
	if err := prepareResource(ctx, rs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropResource(context.Background(), rs); err != nil {
			t.Errorf("drop the resource: %v", err)
		}
	})
	res, err := openResource(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(res.close)
	return res
}

var resourceStores = []struct {
	kind string
	url  func(t *testing.T) string
}{
	{kindSQLite, func(t *testing.T) string { return "sqlite:" + t.TempDir() + "/leases.db" }},
	{kindPostgres, func(t *testing.T) string { return testenv.Postgres.URL(t) }},
	{kindMySQL, func(t *testing.T) string { return testenv.MySQL.URL(t) }},
	{kindEtcd, func(t *testing.T) string { return testenv.Etcd.URL(t) }},
}

// The resource's store refuses a stale epoch itself, numbers accepted
// writes in commit order, and names the epoch each one replaced.
func TestEveryResourceRefusesAStaleEpochAndNumbersTheWritesItAccepts(t *testing.T) {
	for _, s := range resourceStores {
		t.Run(s.kind, func(t *testing.T) {
			res := resourceFor(t, s.url(t))
			ctx := t.Context()
			var lastSeq int64
			for i, w := range []struct {
				epoch    int64
				accepted bool
				prev     int64 // accepted: the epoch replaced; refused: the newer one
			}{
				{5, true, 0}, {5, true, 5}, {4, false, 5}, {7, true, 5}, {6, false, 7}, {7, true, 7},
			} {
				got, err := res.write(ctx, "k", w.epoch, "o")
				if err != nil {
					t.Fatalf("write %d (epoch %d): %v", i, w.epoch, err)
				}
				switch {
				case got.accepted != w.accepted:
					t.Fatalf("write %d (epoch %d): accepted %t, want %t", i, w.epoch, got.accepted, w.accepted)
				case w.accepted && (got.prev != w.prev || got.seq <= lastSeq):
					t.Errorf("write %d (epoch %d): replaced epoch %d as number %d; want epoch %d, after %d",
						i, w.epoch, got.prev, got.seq, w.prev, lastSeq)
				case !w.accepted && got.cur != w.prev:
					t.Errorf("write %d (epoch %d): refused by epoch %d, want %d", i, w.epoch, got.cur, w.prev)
				}
				if got.accepted {
					lastSeq = got.seq
				}
			}
			if err := res.read(ctx, "k"); err != nil {
				t.Errorf("read: %v", err)
			}
		})
	}
}

// Two holders racing on one key, the newer starting halfway: no write of
// the older epoch is accepted after one of the newer.
func TestRacingWritersAreAcceptedInEpochOrder(t *testing.T) {
	for _, s := range resourceStores {
		t.Run(s.kind, func(t *testing.T) {
			res := resourceFor(t, s.url(t))
			ctx := t.Context()
			type accepted struct{ seq, epoch int64 }
			var (
				mu  sync.Mutex
				all []accepted
				wg  sync.WaitGroup
			)
			newer := make(chan struct{})
			for _, epoch := range []int64{1, 2} {
				wg.Go(func() {
					if epoch == 2 {
						<-newer
					}
					for i := range 20 {
						if epoch == 1 && i == 5 {
							close(newer)
						}
						w, err := res.write(ctx, "k", epoch, "o")
						if err != nil {
							t.Errorf("epoch %d: %v", epoch, err)
							return
						}
						if w.accepted {
							mu.Lock()
							all = append(all, accepted{w.seq, epoch})
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			var newest accepted
			for _, a := range all {
				if a.epoch == 2 && (newest.seq == 0 || a.seq < newest.seq) {
					newest = a
				}
			}
			for _, a := range all {
				if a.epoch == 1 && newest.seq != 0 && a.seq > newest.seq {
					t.Errorf("epoch 1 accepted as number %d, after epoch 2's number %d", a.seq, newest.seq)
				}
			}
			if newest.seq == 0 {
				t.Error("the newer holder never wrote")
			}
		})
	}
}
