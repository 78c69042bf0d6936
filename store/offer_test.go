package store_test

import (
	"testing"

	"github.com/tenure-dev/tenure/store"
)

func TestOfferNeverBlocksAndEndsWhatItDroppedWithMissed(t *testing.T) {
	ch := make(chan store.Event, 3)
	for i := range 5 {
		store.Offer(ch, store.Event{Kind: store.Acquired, Key: "k", Epoch: int64(i + 1)})
	}
	var got []store.Event
	for range 3 {
		got = append(got, <-ch)
	}
	// 1 and 2 fitted; 3 found ch full and made room by dropping 1; 4 did
	// the same with 2; 5 with the first Missed.
	if got[len(got)-1].Kind != store.Missed {
		t.Fatalf("after a burst larger than the buffer: %+v, want a Missed event last", got)
	}
	store.Offer(ch, store.Event{Kind: store.Released, Key: "k", Epoch: 9})
	if ev := <-ch; ev.Kind != store.Released || ev.Epoch != 9 {
		t.Fatalf("once there is room again: %+v, want the event itself", ev)
	}
}
