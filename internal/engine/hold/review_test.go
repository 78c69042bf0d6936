package hold_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/tenure-dev/tenure/internal/engine/hold"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A late reply about an older term must not be installed once the newer
// term is gone either: released (or lost), then taken by a peer. The
// keeper would then hold, by its own account for a whole TTL, a term the
// store superseded twice — and a runner may start on it while the peer
// runs (acquirePass and reconcile trust Holds).
func TestALateAcquireReplyIsNotInstalledAfterTheNewerTermWasReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New(memstore.Options{})
		st := &lateFirst{Store: mem, first: make(chan struct{}), release: make(chan struct{})}
		k := newKeeper(st, "A")
		late := make(chan hold.Acquired)
		go func() {
			res, _ := k.Acquire(context.Background(), "telegram", true)
			late <- res
		}()
		<-st.first // the first term is granted; its reply is held back
		newer := mustAcquire(t, k, "telegram")
		term, _ := k.Term("telegram")
		if err := k.Release(context.Background(), term); err != nil {
			t.Fatal(err)
		}
		peer := mustAcquire(t, newKeeper(mem, "B"), "telegram")
		close(st.release)
		old := <-late
		if k.Holds("telegram") {
			got, _ := k.Term("telegram")
			t.Fatalf("the late reply (%+v) installed epoch %d after epoch %d was released and B took epoch %d: A holds the key by its own account", old, got.Epoch, newer.Epoch, peer.Epoch)
		}
	})
}
