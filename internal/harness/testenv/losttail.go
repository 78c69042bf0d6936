package testenv

import (
	"context"
	"fmt"
	"time"

	"github.com/tenure-dev/tenure/store"
)

// Writes is a stream of acknowledged commits through a store, for
// measuring what a failover loses: StartWrites acquires key WriteKey(n)
// for n = 1, 2, … and renews one lease after each, one call after the
// other, until a call fails (the primary is gone).
type Writes struct {
	acked []time.Time // acked[n-1]: key n's acquisition and the renewal after it
	done  chan struct{}
}

// WriteKey is the key of the n-th acquisition of a Writes stream.
func WriteKey(n int) string { return fmt.Sprintf("k%08d", n) }

// StartWrites starts the stream through s, renewing owner's term renewed
// on key "r" (acquired by the caller with ttl).
func StartWrites(s store.Store, owner string, renewed int64, ttl, grace time.Duration) *Writes {
	w := &Writes{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for n := 1; ; n++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			res, err := s.Acquire(ctx, store.AcquireRequest{Key: WriteKey(n), Owner: owner, TTL: ttl, Grace: grace})
			if err == nil && res.Acquired {
				_, err = s.Renew(ctx, owner, ttl, []store.RenewItem{{Key: "r", Epoch: renewed}})
			}
			cancel()
			if err != nil || !res.Acquired {
				return
			}
			w.acked = append(w.acked, time.Now())
		}
	}()
	return w
}

// LostTail waits for the stream to end and, given the highest n whose key
// the new primary kept, returns how many acknowledged commits it lacks
// (an acquisition and a renewal each) and how stale it is: from the last
// acknowledgement it kept to the last one given.
func (w *Writes) LostTail(kept int) (int, time.Duration) {
	<-w.done
	if kept >= len(w.acked) {
		return 0, 0
	}
	from := w.acked[0]
	if kept > 0 {
		from = w.acked[kept-1]
	}
	return 2 * (len(w.acked) - kept), w.acked[len(w.acked)-1].Sub(from)
}

// Wait waits for the stream to end.
func (w *Writes) Wait() { <-w.done }
