package store

// Offer sends ev on ch without blocking, for a [Watcher] that must never
// wait for its reader. When ch is full it drops the oldest event waiting
// and sends a [Missed] event in its place: the reader learns that it fell
// behind, after every event it did receive, and reads the table again.
// ch must have one sender at a time (a Watcher's own goroutine, or its
// sends under one lock).
func Offer(ch chan Event, ev Event) {
	select {
	case ch <- ev:
		return
	default:
	}
	select {
	case <-ch: // dropped: Missed stands for it and for ev
	default: // the reader emptied ch meanwhile
	}
	select {
	case ch <- Event{Kind: Missed}:
	default: // cannot happen with one sender; never block all the same
	}
}
