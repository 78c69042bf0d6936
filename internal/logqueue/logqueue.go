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
// dropped and reported as they are (a metric must not wait for the sink),
// and their count is written once the sink takes records again: a stalled
// sink costs log lines, never work, and never more memory than the queue
// holds, which grows only as records wait.
package logqueue

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultSize is a queue's size for a process's log: it holds a burst of
// acquisitions of a large pool without dropping any, and takes memory only
// as records wait (about 300 bytes each, 5 MB when full).
const DefaultSize = 1 << 14

// DroppedMessage is the message of the record that says how many records
// were dropped; its "dropped" attribute holds the count.
const DroppedMessage = "log records dropped: the log handler did not keep up"

// Queue hands records to a slog.Handler from one goroutine while it is
// started; before Start and after Stop, records are written by the caller,
// as the handler alone would.
type Queue struct {
	size   int
	onDrop func(n int)
	wake   chan struct{} // a record was queued, or Stop was called; never blocks

	mu       sync.Mutex
	started  bool
	pending  []item        // queued, not yet taken by the writer
	inFlight int           // taken by the writer, not yet written
	dropped  int           // dropped since the writer last said so
	last     slog.Handler  // the handler of the last record taken, which says so
	writer   chan struct{} // closed when the running writer goroutine exits; nil when none runs
}

// item is one record and the handler (with its attributes) to write it to.
type item struct {
	h   slog.Handler
	ctx context.Context
	r   slog.Record
}

// New returns a stopped Queue that holds up to size records while it runs.
// onDrop, if not nil, is told of each record dropped, as it is dropped (by
// the goroutine that logged it): a count of drops must not wait for the
// sink that causes them.
func New(size int, onDrop func(n int)) *Queue {
	return &Queue{size: max(size, 1), onDrop: onDrop, wake: make(chan struct{}, 1)}
}

// Handler returns a slog.Handler that writes through q to h.
func (q *Queue) Handler(h slog.Handler) slog.Handler { return handler{q: q, inner: h} }

// Start makes records wait in the queue, or be dropped when it is full,
// and starts the writing goroutine unless the one a timed-out Stop left
// behind still runs (it goes on). Starting a started Queue does nothing.
func (q *Queue) Start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.started = true
	if q.writer == nil {
		q.writer = make(chan struct{})
		go q.write(q.writer)
	}
}

// Stop makes records be written by their caller again and waits, up to
// wait, until every record queued so far has been written. It reports
// whether they were; if not, the goroutine goes on writing them when the
// sink takes them. Stopping a stopped Queue waits for that goroutine.
func (q *Queue) Stop(wait time.Duration) bool { return q.StopOrGiveUp(wait, nil) }

// StopOrGiveUp is Stop that also stops waiting once giveUp is closed: an
// operator who asks twice for a process to end does not wait for its log.
func (q *Queue) StopOrGiveUp(wait time.Duration, giveUp <-chan struct{}) bool {
	q.mu.Lock()
	q.started = false
	writer := q.writer
	q.mu.Unlock()
	if writer == nil {
		return true
	}
	q.poke()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-writer:
		return true
	case <-t.C:
		return false
	case <-giveUp:
		return false
	}
}

func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// enqueue queues it, or drops it when the queue is full; it reports false
// when q is stopped, for the caller to write it itself.
func (q *Queue) enqueue(it item) bool {
	q.mu.Lock()
	if !q.started {
		q.mu.Unlock()
		return false
	}
	full := len(q.pending)+q.inFlight >= q.size
	if full {
		q.dropped++
	} else {
		q.pending = append(q.pending, it)
	}
	q.mu.Unlock()
	if full {
		if q.onDrop != nil {
			q.onDrop(1)
		}
	} else {
		q.poke()
	}
	return true
}

// write hands the queued records to their handlers, in order, a batch at
// a time (what was queued when it looked), and after a batch, says how
// many records were dropped while it waited: a sink that has just come
// back first gets what was kept, then the count. It returns once q is
// stopped and nothing is left to write.
func (q *Queue) write(done chan struct{}) {
	for {
		q.mu.Lock()
		for len(q.pending) == 0 && q.dropped == 0 {
			if !q.started {
				q.writer = nil
				q.mu.Unlock()
				close(done)
				return
			}
			q.mu.Unlock()
			<-q.wake
			q.mu.Lock()
		}
		// Records are dropped only while the queue is full, so those
		// counted now came after (nearly) every record of the batch: the
		// count is written after it.
		batch, n := q.pending, q.dropped
		q.pending, q.inFlight, q.dropped = nil, len(batch), 0
		if len(batch) > 0 {
			q.last = batch[len(batch)-1].h
		}
		last := q.last
		q.mu.Unlock()

		for i, it := range batch {
			_ = it.h.Handle(it.ctx, it.r)
			batch[i] = item{} // let the record go
			q.mu.Lock()
			q.inFlight--
			q.mu.Unlock()
		}
		if n > 0 && last.Enabled(context.Background(), slog.LevelWarn) {
			r := slog.NewRecord(time.Now(), slog.LevelWarn, DroppedMessage, 0)
			r.AddAttrs(slog.Int("dropped", n))
			_ = last.Handle(context.Background(), r)
		}
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
