package logqueue_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-dev/tenure/internal/logqueue"
)

// sink records what it is handed, as "message k=v ...", and blocks while
// stalled, as a full stderr pipe does.
type sink struct {
	level   slog.Level   // records below it are not enabled
	inside  atomic.Int32 // Handle calls under way
	most    atomic.Int32 // the most Handle calls ever under way at once
	mu      sync.Mutex
	lines   []string
	stalled chan struct{} // non-nil while stalled
	attrs   []slog.Attr
	shared  *sink // the sink that keeps the lines, for WithAttrs copies
}

func newSink() *sink { s := &sink{}; s.shared = s; return s }

func (s *sink) stall() {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	s.shared.stalled = make(chan struct{})
}

func (s *sink) open() {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	if s.shared.stalled != nil {
		close(s.shared.stalled)
		s.shared.stalled = nil
	}
}

func (s *sink) Enabled(_ context.Context, l slog.Level) bool { return l >= s.shared.level }

func (s *sink) Handle(_ context.Context, r slog.Record) error {
	n := s.shared.inside.Add(1)
	defer s.shared.inside.Add(-1)
	for m := s.shared.most.Load(); n > m && !s.shared.most.CompareAndSwap(m, n); m = s.shared.most.Load() {
	}
	s.shared.mu.Lock()
	c := s.shared.stalled
	s.shared.mu.Unlock()
	if c != nil {
		<-c
	}
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range s.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	s.shared.lines = append(s.shared.lines, b.String())
	return nil
}

func (s *sink) WithAttrs(as []slog.Attr) slog.Handler {
	return &sink{attrs: append(slices.Clip(s.attrs), as...), shared: s.shared}
}

func (s *sink) WithGroup(string) slog.Handler { return s }

func (s *sink) got() []string {
	s.shared.mu.Lock()
	defer s.shared.mu.Unlock()
	return slices.Clone(s.shared.lines)
}

// A stalled sink costs records, never the caller's time: the first record
// waits in the sink, the queue keeps the next ones up to its size (the
// one in the sink included), the rest are dropped and counted at once,
// and once the sink takes records again it gets the kept ones in order,
// then how many were dropped.
func TestAStalledSinkDropsRecordsAndNeverBlocksTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 3
		s := newSink()
		var reported atomic.Int64
		q := logqueue.New(size, func(n int) { reported.Add(int64(n)) })
		log := slog.New(q.Handler(s)).With("owner", "a")
		q.Start()
		t.Cleanup(func() { s.open(); q.Stop(time.Second) })
		s.stall()
		log.Info("r", "i", 0)
		synctest.Wait() // the writer holds record 0, stuck in the sink
		for i := 1; i <= size+4; i++ {
			log.Info("r", "i", i) // a blocked call would never return: the bubble would deadlock
		}
		if got := s.got(); len(got) != 0 {
			t.Fatalf("the stalled sink wrote %q", got)
		}
		if n := reported.Load(); n != 5 {
			t.Fatalf("%d drops reported while the sink is stalled, want 5, as they happen", n)
		}
		s.open()
		synctest.Wait()
		want := []string{"r owner=a i=0", "r owner=a i=1", "r owner=a i=2", logqueue.DroppedMessage + " owner=a dropped=5"}
		if got := s.got(); !slices.Equal(got, want) {
			t.Fatalf("the sink got\n%q\nwant\n%q", got, want)
		}
		log.Info("after", "i", 9)
		if !q.Stop(time.Second) {
			t.Fatal("Stop did not flush a sink that takes records")
		}
		if got := s.got(); got[len(got)-1] != "after owner=a i=9" {
			t.Fatalf("the sink's last record %q, want the one queued before Stop", got[len(got)-1])
		}
	})
}

// stalledAfterOne starts a queue of size whose sink then stalls with the
// record "one" stuck in it (or, with a size above one, queued).
func stalledAfterOne(t *testing.T, size int, level slog.Level) (*sink, *logqueue.Queue, *slog.Logger) {
	s := newSink()
	s.level = level
	q := logqueue.New(size, nil)
	log := slog.New(q.Handler(s))
	t.Cleanup(s.open)
	q.Start()
	s.stall()
	log.Error("one")
	synctest.Wait()
	return s, q, log
}

// Stop writes out what is queued; with a sink still stalled it gives up
// after its wait, and the records follow when the sink comes back.
func TestStopWaitsForTheQueueUpToItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, q, log := stalledAfterOne(t, 8, slog.LevelInfo)
		log.Info("two")
		began := time.Now()
		if q.Stop(5 * time.Second) {
			t.Fatal("Stop reported a flush through a stalled sink")
		}
		if waited := time.Since(began); waited != 5*time.Second {
			t.Fatalf("Stop waited %v, want its bound of 5s", waited)
		}
		s.open()
		synctest.Wait()
		if got := s.got(); !slices.Equal(got, []string{"one", "two"}) {
			t.Fatalf("after the sink came back it got %q, want both records", got)
		}
	})
}

// Before Start and after Stop a record is written before the call returns,
// as the sink alone would; a Queue can be started again.
func TestAStoppedQueueWritesAtOnce(t *testing.T) {
	s := newSink()
	q := logqueue.New(8, nil)
	log := slog.New(q.Handler(s))
	log.Info("before")
	if got := s.got(); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("before Start the sink got %q", got)
	}
	q.Start()
	q.Start()
	log.Info("queued")
	if !q.Stop(time.Minute) {
		t.Fatal("Stop did not flush")
	}
	if !q.Stop(time.Minute) {
		t.Fatal("stopping a stopped queue did not report it flushed")
	}
	log.Info("after")
	q.Start()
	log.Info("again")
	q.Stop(time.Minute)
	if got := s.got(); !slices.Equal(got, []string{"before", "queued", "after", "again"}) {
		t.Fatalf("the sink got %q", got)
	}
}

// A Run that starts again after a Stop that gave up on a stalled sink
// shares the one writer left behind: the sink never gets two records at
// once, and gets them in order.
func TestAStartAfterAStopThatGaveUpKeepsOneWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, q, log := stalledAfterOne(t, 8, slog.LevelInfo)
		if q.Stop(time.Second) {
			t.Fatal("Stop reported a flush through a stalled sink")
		}
		q.Start()
		log.Info("two")
		s.open()
		synctest.Wait()
		if !q.Stop(time.Second) {
			t.Fatal("Stop did not flush once the sink came back")
		}
		if got := s.got(); !slices.Equal(got, []string{"one", "two"}) || s.most.Load() != 1 {
			t.Fatalf("the sink got %q, at most %d at once; want both in order, one at a time", got, s.most.Load())
		}
	})
}

// Records dropped after the last one kept are reported too, by Stop at the
// latest, although nothing is logged after them; and the count is a
// warning, which a handler that takes only errors does not get (slog's own
// handlers do not filter in Handle).
func TestADropAfterTheLastRecordKeptIsReportedAsAWarning(t *testing.T) {
	for _, c := range []struct {
		level slog.Level
		want  []string
	}{
		{slog.LevelInfo, []string{"one", logqueue.DroppedMessage + " dropped=1"}},
		{slog.LevelError, []string{"one"}},
	} {
		// A subtest each: synctest.Test does not run on a t that failed.
		t.Run(c.level.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, q, log := stalledAfterOne(t, 1, c.level)
				log.Error("two") // dropped: the queue of one holds "one"
				s.open()
				if !q.Stop(time.Second) {
					t.Fatal("Stop did not flush")
				}
				if got := s.got(); !slices.Equal(got, c.want) {
					t.Fatalf("a sink of level %v got %q, want %q", c.level, got, c.want)
				}
			})
		})
	}
}

// StopOrGiveUp stops waiting for a stalled sink once told to give up.
func TestStopOrGiveUpStopsWaitingWhenToldTo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, q, _ := stalledAfterOne(t, 8, slog.LevelInfo)
		giveUp := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(giveUp) })
		began := time.Now()
		if q.StopOrGiveUp(time.Hour, giveUp) {
			t.Fatal("StopOrGiveUp reported a flush through a stalled sink")
		}
		if waited := time.Since(began); waited != time.Second {
			t.Fatalf("waited %v, want the second until it was told to give up", waited)
		}
	})
}
