// Package logqueue writes log records on a goroutine of its own, so that
// code which logs never waits for the sink.
//
// A log sink can stop taking records: stderr a full pipe nobody drains, a
// stuck log shipper, a terminal paused with Ctrl-S. A slog.Handler that
// writes to it then blocks whoever logs, wherever that is. In Tenure that
// was the loop that renews leases (it logs a renewal it could not
// confirm) and the loop that starts work (it logs each acquisition): a
// replica whose stderr stalled stopped renewing, and lost every key at its
// deadline although the store answered. Through a Queue, a record is
// copied into a bounded queue and the caller goes on; one goroutine hands
// the records to the sink in order. When the queue is full, records are
// dropped and counted, and the count is written (and reported) as soon as
// the sink takes records again: a stalled sink costs log lines, never
// work, and never more memory than the queue holds.
package logqueue

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DroppedMessage is the message of the record that says how many records
// were dropped; its "dropped" attribute holds the count.
const DroppedMessage = "log records dropped: the log handler did not keep up"

// Queue hands records to a slog.Handler from one goroutine while it is
// started; before Start and after Stop, records are written by the caller,
// as the handler alone would.
type Queue struct {
	size   int
	onDrop func(n int)

	mu      sync.Mutex
	items   chan item     // nil while stopped
	done    chan struct{} // closed when the writer of items has written them all
	dropped int           // dropped since the last report
}

// item is one record and the handler (with its attributes) to write it to.
type item struct {
	h   slog.Handler
	ctx context.Context
	r   slog.Record
}

// New returns a stopped Queue that holds up to size records while it runs.
// onDrop, if not nil, is told each count of dropped records as it is
// written; it is called from the writing goroutine.
func New(size int, onDrop func(n int)) *Queue {
	return &Queue{size: max(size, 1), onDrop: onDrop}
}

// Handler returns a slog.Handler that writes through q to h.
func (q *Queue) Handler(h slog.Handler) slog.Handler { return handler{q: q, inner: h} }

// Start starts the writing goroutine; from now on a record waits in the
// queue, or is dropped when it is full. Starting a started Queue does
// nothing.
func (q *Queue) Start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.items != nil {
		return
	}
	q.items, q.done = make(chan item, q.size), make(chan struct{})
	go q.write(q.items, q.done)
}

// Stop makes records be written by their caller again and waits, up to
// wait, until every record queued so far has been written. It reports
// whether they were; if not, the goroutine goes on writing them when the
// sink takes them. Stopping a stopped Queue returns true.
func (q *Queue) Stop(wait time.Duration) bool {
	q.mu.Lock()
	items, done := q.items, q.done
	q.items = nil
	q.mu.Unlock()
	if items == nil {
		return true
	}
	close(items) // no Handle sends to it any more: it is nil under mu
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// enqueue queues it, or counts it dropped; it reports false when q is
// stopped, for the caller to write it itself.
func (q *Queue) enqueue(it item) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.items == nil {
		return false
	}
	select {
	case q.items <- it:
	default:
		q.dropped++
	}
	return true
}

// write hands every record of items to its handler, in order. After a
// record, if records were dropped and either the queue is empty or more
// than a whole queue's worth was written since the last report, it writes
// how many: a
// sink that has just come back first gets what was kept, then the count,
// and a sink that keeps falling behind hears of it at least once a queue.
func (q *Queue) write(items <-chan item, done chan<- struct{}) {
	defer close(done)
	written := 0
	for it := range items {
		_ = it.h.Handle(it.ctx, it.r)
		written++
		if len(items) > 0 && written <= q.size {
			continue
		}
		written = 0
		q.mu.Lock()
		n := q.dropped
		q.dropped = 0
		q.mu.Unlock()
		if n == 0 {
			continue
		}
		if q.onDrop != nil {
			q.onDrop(n)
		}
		r := slog.NewRecord(time.Now(), slog.LevelWarn, DroppedMessage, 0)
		r.AddAttrs(slog.Int("dropped", n))
		_ = it.h.Handle(context.Background(), r)
	}
}

// handler is the slog.Handler of a Queue; WithAttrs and WithGroup keep the
// queue and wrap the inner handler.
type handler struct {
	q     *Queue
	inner slog.Handler
}

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// Handle queues a copy of r (a Handler that keeps a record must Clone
// it); the context is kept for its values, not its cancellation, since
// the record is written after the caller has moved on.
func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if h.q.enqueue(item{h: h.inner, ctx: context.WithoutCancel(ctx), r: r.Clone()}) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{q: h.q, inner: h.inner.WithAttrs(as)}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{q: h.q, inner: h.inner.WithGroup(name)}
}
