package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
)

// openForeign opens a Store on path that this process's watches treat as
// another process's: it has a hub (hence an origin) and a gate of its own.
// It polls nothing itself.
func openForeign(t *testing.T, path string) *Store {
	t.Helper()
	s := openAt(t, path, Options{WatchPoll: -1})
	s.hub, s.gate = newHub(), make(gate, 1)
	return s
}

// pollerOf reports whether the hub of s has a poller running.
func pollerOf(s *Store) bool {
	s.hub.pollMu.Lock()
	defer s.hub.pollMu.Unlock()
	return s.hub.poller != nil
}

// quiet asserts that no event arrives for d: several looks of the poller.
func quiet(t *testing.T, ch <-chan store.Event, d time.Duration) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

func TestAReleaseInAnotherProcessReachesAWatchHereQuickly(t *testing.T) {
	const rounds = 25
	path := filepath.Join(t.TempDir(), "leases.db")
	s := openAt(t, path, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := s.Watch(ctx, "handoff/")
	if err != nil {
		t.Fatal(err)
	}

	cmd := childCommand(childRequest{Path: path, Key: "handoff/job", Owner: "child", Rounds: rounds})
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	acks, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer acks.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// When the parent saw each release, and when it then held the key: the
	// handoff the engine makes on a Released event.
	released, tookOver := map[int64]time.Time{}, map[int64]time.Time{}
	acquired := 0
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for done := false; !done || len(released) < rounds; {
		select {
		case ev := <-evs:
			now := time.Now()
			if ev.Owner == "parent" {
				continue // this process's own takeovers
			}
			if ev.Key != "handoff/job" || ev.Owner != "child" {
				t.Fatalf("event %+v, want the child's handoff/job", ev)
			}
			switch ev.Kind {
			case store.Released:
				if _, dup := released[ev.Epoch]; dup {
					t.Fatalf("release of epoch %d delivered twice", ev.Epoch)
				}
				released[ev.Epoch] = now
				mine := mustAcquire(t, s, "handoff/job", "parent")
				tookOver[ev.Epoch] = time.Now()
				if err := s.Release(ctx, "parent", []store.Term{{Key: "handoff/job", Epoch: mine}}); err != nil {
					t.Fatal(err)
				}
				if _, err := acks.Write([]byte("\n")); err != nil {
					t.Fatalf("tell the child: %v", err)
				}
			case store.Acquired:
				acquired++
			}
		case err := <-exited:
			if err != nil {
				t.Fatalf("child process: %v: %s", err, stderr.Bytes())
			}
			done = true
			deadline.Reset(0)
		case <-deadline.C:
			t.Fatalf("%d of %d releases were delivered (the child waits for each)", len(released), rounds)
		}
	}

	var made []childRelease
	if err := json.Unmarshal(stdout.Bytes(), &made); err != nil || len(made) != rounds {
		t.Fatalf("child output %q: %v", stdout.Bytes(), err)
	}
	var lat, handoff []time.Duration
	for _, r := range made {
		got, ok := released[r.Epoch]
		if !ok {
			t.Fatalf("release of epoch %d never delivered", r.Epoch)
		}
		at := time.Unix(0, r.Released)
		if d := got.Sub(at); d > time.Second {
			t.Errorf("release of epoch %d delivered after %v, want well under 1s", r.Epoch, d)
		}
		lat = append(lat, got.Sub(at))
		handoff = append(handoff, tookOver[r.Epoch].Sub(at))
	}
	t.Logf("over %d releases by another process (%d of its acquisitions also seen):", rounds, acquired)
	t.Logf("  release → event here:      %s", spread(lat))
	t.Logf("  release → key held here:   %s", spread(handoff))
}

// spread summarises latencies for the test log.
func spread(ds []time.Duration) string {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return fmt.Sprintf("min %v, p50 %v, p90 %v, max %v",
		ds[0].Round(100*time.Microsecond), at(0.5).Round(100*time.Microsecond), at(0.9).Round(100*time.Microsecond), ds[len(ds)-1].Round(100*time.Microsecond))
}

func TestForeignChangesArriveOnceAndOwnChangesAreNotRepeated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	here := openAt(t, path, Options{WatchPoll: 10 * time.Millisecond})
	there := openForeign(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := here.Watch(ctx, "job/")
	if err != nil {
		t.Fatal(err)
	}

	mine := mustAcquire(t, here, "job/mine", "here")
	if ev := testenv.NextEvent(t, evs); ev != (store.Event{Kind: store.Acquired, Key: "job/mine", Owner: "here", Epoch: mine}) {
		t.Fatalf("own acquisition: %+v", ev)
	}
	quiet(t, evs, 100*time.Millisecond) // the poller saw the row and skipped it

	a := mustAcquire(t, there, "job/a", "there")
	b := mustAcquire(t, there, "job/b", "there")
	mustAcquire(t, there, "other/c", "there") // outside the prefix
	want := []store.Event{
		{Kind: store.Acquired, Key: "job/a", Owner: "there", Epoch: a},
		{Kind: store.Acquired, Key: "job/b", Owner: "there", Epoch: b},
	}
	for _, w := range want {
		if ev := testenv.NextEvent(t, evs); ev != w {
			t.Fatalf("got %+v, want %+v", ev, w)
		}
	}
	// Renewals commit, but are no events.
	for range 5 {
		if _, err := there.Renew(ctx, "there", time.Minute, []store.RenewItem{{Key: "job/a", Epoch: a}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Millisecond)
	}
	quiet(t, evs, 100*time.Millisecond)

	// One statement releasing two terms gives two events.
	if err := there.Release(ctx, "there", []store.Term{{Key: "job/a", Epoch: a}, {Key: "job/b", Epoch: b}}); err != nil {
		t.Fatal(err)
	}
	got := []store.Event{testenv.NextEvent(t, evs), testenv.NextEvent(t, evs)}
	slices.SortFunc(got, func(x, y store.Event) int { return bytes.Compare([]byte(x.Key), []byte(y.Key)) })
	if got[0] != (store.Event{Kind: store.Released, Key: "job/a", Owner: "there", Epoch: a}) ||
		got[1] != (store.Event{Kind: store.Released, Key: "job/b", Owner: "there", Epoch: b}) {
		t.Fatalf("releases: %+v", got)
	}
	quiet(t, evs, 100*time.Millisecond)
}

func TestRevocationByAnotherProcessIsNoEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	here := openAt(t, path, Options{WatchPoll: 10 * time.Millisecond})
	there := openForeign(t, path)
	mustAcquire(t, here, "job", "here")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := here.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := there.Revoke(ctx, "job"); err != nil || !ok {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	// The key is not free until expiry + grace: a Released would send peers
	// to acquire in vain.
	quiet(t, evs, 150*time.Millisecond)
}

func TestAnIdleWatchDeliversNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s := openAt(t, path, Options{WatchPoll: 10 * time.Millisecond})
	mustAcquire(t, openForeign(t, path), "before", "there") // before the watch
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	quiet(t, evs, 300*time.Millisecond)
}

func TestTheLastWatchToEndStopsThePoller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other := openAt(t, path, Options{}) // same file, same hub
	before := goleak.IgnoreCurrent()

	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	first, err := s.Watch(ctx1, "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := other.Watch(ctx2, "")
	if err != nil {
		t.Fatal(err)
	}
	if !pollerOf(s) {
		t.Fatal("no poller while two watches are active")
	}
	if s.hub != other.hub {
		t.Fatal("two Stores of one file and table have separate hubs")
	}
	cancel1()
	for range first {
	}
	if !pollerOf(s) {
		t.Fatal("the poller stopped while a watch is still active")
	}
	cancel2()
	for range second {
	}
	if pollerOf(s) {
		t.Fatal("the poller runs on after the last watch ended")
	}
	goleak.VerifyNone(t, before)

	// Closing the Store ends its watches, and with them the poller.
	third, err := s.Watch(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !pollerOf(s) {
		t.Fatal("no poller for a new watch")
	}
	s.Close()
	for range third {
	}
	if pollerOf(s) {
		t.Fatal("the poller runs on after the Store closed")
	}
	goleak.VerifyNone(t, before)
}

func TestNegativeWatchPollLeavesOtherProcessesUnwatched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s := openAt(t, path, Options{WatchPoll: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if pollerOf(s) {
		t.Fatal("a poller started though WatchPoll is negative")
	}
	mustAcquire(t, openForeign(t, path), "k", "there")
	quiet(t, evs, 150*time.Millisecond)
	// In-process changes still arrive.
	e := mustAcquire(t, s, "mine", "here")
	if ev := testenv.NextEvent(t, evs); ev != (store.Event{Kind: store.Acquired, Key: "mine", Owner: "here", Epoch: e}) {
		t.Fatalf("own acquisition: %+v", ev)
	}
}

// oldSchema is the table as versions before change numbering made it.
const oldSchema = `CREATE TABLE tenure_leases (
	key        TEXT    NOT NULL PRIMARY KEY,
	owner      TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	released   INTEGER NOT NULL DEFAULT 0,
	running    INTEGER NOT NULL DEFAULT 0,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID`

func TestOpeningATableOfAnOlderVersionAddsChangeNumbering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	raw, err := sql.Open("sqlite", dsn(path, time.Second, false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// The older version's acquisition, as it wrote it.
	oldInsert := `INSERT INTO tenure_leases (key, owner, epoch, expires_at, released, running, updated_at)
VALUES (?1, 'old', 1, ` + nowUS + ` + 60000000, 0, 1, ` + nowUS + `)`
	if _, err := raw.Exec(oldSchema); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(oldInsert, "held"); err != nil {
		t.Fatal(err)
	}

	s := openAt(t, path, Options{WatchPoll: 10 * time.Millisecond})
	again := openAt(t, path, Options{}) // a second open finds nothing to add
	if res := acquire(t, again, "held", "new", time.Minute, time.Second); res.Acquired || res.Holder.Owner != "old" {
		t.Fatalf("the old row after migration: %+v", res)
	}
	var n int
	if err := raw.QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name = 'tenure_leases_change_seq'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("change_seq index: %d, %v", n, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// An older version still writes the migrated table; its changes are
	// not numbered, so they are no events — the documented limit.
	if _, err := raw.Exec(oldInsert, "old-writer"); err != nil {
		t.Fatal(err)
	}
	quiet(t, evs, 100*time.Millisecond)
	e := mustAcquire(t, openForeign(t, path), "new-writer", "there")
	if ev := testenv.NextEvent(t, evs); ev != (store.Event{Kind: store.Acquired, Key: "new-writer", Owner: "there", Epoch: e}) {
		t.Fatalf("event after migration: %+v", ev)
	}
}

func TestWatchPollIsValidatedAndReadFromTheURL(t *testing.T) {
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{WatchPoll: time.Microsecond}); !errors.Is(err, store.ErrInvalidDuration) {
		t.Fatalf("WatchPoll 1µs: %v, want ErrInvalidDuration", err)
	}
	for url, want := range map[string]time.Duration{
		"sqlite:x.db":                 0,
		"sqlite:x.db?watch_poll=20ms": 20 * time.Millisecond,
		"sqlite:x.db?watch_poll=off":  -1,
	} {
		_, opts, err := ParseURL(url)
		if err != nil || opts.WatchPoll != want {
			t.Errorf("ParseURL(%q): WatchPoll %v, %v; want %v", url, opts.WatchPoll, err, want)
		}
	}
	for _, url := range []string{"sqlite:x.db?watch_poll=0", "sqlite:x.db?watch_poll=-1s", "sqlite:x.db?watch_poll=fast", "sqlite:x.db?watch_poll=10us"} {
		if _, _, err := ParseURL(url); !errors.Is(err, store.ErrInvalidURL) && !errors.Is(err, store.ErrInvalidDuration) {
			t.Errorf("ParseURL(%q): %v, want an error", url, err)
		}
	}
}
