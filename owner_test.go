package tenure_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// Two replicas given one owner name (a hostname shared by host-networked
// containers, a copied unit file) must not take a key from each other:
// the id the store sees is the name plus an incarnation drawn per start.
func TestTwoReplicasGivenOneOwnerNameNeverRunAKeyAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		runs := &runLog{}
		a := newReplica(t, st, "host-1")
		a.Set("telegram", tenure.Job{Runner: runs.runner("first")})
		b := newReplica(t, st, "host-1")
		b.Set("telegram", tenure.Job{Runner: runs.runner("second")})
		a.start()
		b.start()
		defer a.stop()
		defer b.stop()
		for range 10 {
			advance(renew)
		}
		wantNoOverlap(t, runs)
		if n := runs.count(); n != 1 {
			t.Fatalf("telegram started %d times in 10 rounds, want once", n)
		}
		if a.Owner() == b.Owner() {
			t.Fatalf("both replicas hold leases as %q", a.Owner())
		}
		for _, id := range []string{a.Owner(), b.Owner()} {
			if !strings.HasPrefix(id, "host-1#") {
				t.Fatalf("owner id %q does not start with the configured name and #", id)
			}
		}
		if got := lease(t, st, "telegram").Owner; got != a.Owner() {
			t.Fatalf("telegram is held by %q, want the first replica %q", got, a.Owner())
		}
	})
}

// A renewal lost to a term held under this replica's own name is a
// misconfiguration or a frozen twin, and the log says so as an error.
func TestALeaseLostToATwinOfTheSameNameIsLoggedAsAnError(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		logs := &logRecorder{}
		cut := &testenv.Partition{Store: st}
		a := newReplica(t, cut, "host-1", withLogger(slog.New(logs)))
		a.Set("telegram", tenure.Job{Runner: newRecorder().runner("t")})
		a.start()
		defer a.stop()
		b := newReplica(t, st, "host-1")
		b.Set("telegram", tenure.Job{Runner: newRecorder().runner("t")})
		b.start()
		defer b.stop()

		cut.Cut.Store(true) // A is cut off; B takes over after expiry + grace
		advance(ttl + grace + renew)
		if got := lease(t, st, "telegram").Owner; got != b.Owner() {
			t.Fatalf("telegram is held by %q, want the twin %q", got, b.Owner())
		}
		cut.Cut.Store(false) // A's next renewal is refused
		advance(2 * renew)
		msg, ok := logs.find(slog.LevelError, "owner name")
		if !ok {
			t.Fatalf("no error names the shared owner name; logs:\n%s", logs.dump())
		}
		if !strings.Contains(msg, b.Owner()) || !strings.Contains(msg, "telegram") {
			t.Fatalf("the error does not name the key and the twin: %s", msg)
		}
	})
}

func TestOwnerNamesAreValidatedAndTheDefaultIsTheHostAndPid(t *testing.T) {
	sup, err := tenure.New(tenure.Config{})
	if err != nil {
		t.Fatal(err)
	}
	name, _, ok := strings.Cut(sup.Owner(), "#")
	if !ok || name != tenure.DefaultOwner() || !strings.Contains(name, ":") {
		t.Fatalf("default owner id %q, want %q#incarnation", sup.Owner(), tenure.DefaultOwner())
	}
	if _, err := tenure.New(tenure.Config{Owner: strings.Repeat("x", 600)}); err == nil {
		t.Fatal("an owner name too long for the store was accepted")
	}
}

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
	lvls []slog.Level
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, b.String())
	l.lvls = append(l.lvls, r.Level)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) find(level slog.Level, substr string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range l.recs {
		if l.lvls[i] == level && strings.Contains(r, substr) {
			return r, true
		}
	}
	return "", false
}

func (l *logRecorder) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.recs, "\n")
}

var _ = time.Second
