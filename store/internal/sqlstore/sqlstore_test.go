package sqlstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
)

func TestConcurrentFirstCallsMigrateOnceAndAFailureIsRetried(t *testing.T) {
	var m Migration
	var runs atomic.Int32
	fail := errors.New("no table yet")
	if err := m.Ensure(context.Background(), func(context.Context) error { return fail }); !errors.Is(err, fail) {
		t.Fatalf("Ensure = %v, want the migration's error", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := m.Ensure(context.Background(), func(context.Context) error {
				runs.Add(1)
				time.Sleep(10 * time.Millisecond)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d migrations after a failed one, want 1", n)
	}
	if err := m.Run(context.Background(), func(context.Context) error { runs.Add(1); return nil }); err != nil || runs.Load() != 2 {
		t.Fatalf("Run = %v after %d runs; an explicit run always runs", err, runs.Load())
	}
}

func TestPrefixEndIsTheFirstStringPastThePrefix(t *testing.T) {
	for prefix, want := range map[string]string{
		"job":        "joc",
		"a\xff":      "b",
		"\xc3":       "\xc4",
		"":           "",
		"\xff\xff":   "",
		"x\xff\xffy": "x\xff\xffz",
	} {
		got, ok := PrefixEnd(prefix)
		if got != want || ok != (want != "") {
			t.Errorf("PrefixEnd(%q) = %q, %t; want %q", prefix, got, ok, want)
		}
	}
}

func TestAcquireRetriesARefusalByATermThatEndedMeanwhile(t *testing.T) {
	req := store.AcquireRequest{Key: "k", Owner: "b", TTL: time.Second, Grace: time.Second}
	answers := []store.AcquireResult{
		{Holder: store.Lease{Key: "k", Owner: "a", Released: true}},              // released since: retry
		{Holder: store.Lease{Key: "k", Owner: "a", TimeLeft: -2 * time.Second}},  // past grace: retry
		{Holder: store.Lease{Key: "k", Owner: "a", TimeLeft: -time.Millisecond}}, // within grace: report
	}
	calls := 0
	once := func(context.Context, store.AcquireRequest) (store.AcquireResult, error) {
		calls++
		return answers[calls-1], nil
	}
	res, err := Acquire(context.Background(), req, once)
	if err != nil || res.Acquired || res.Holder.TimeLeft != -time.Millisecond || calls != 3 {
		t.Fatalf("Acquire = %+v, %v after %d calls; want the holder within grace after 3", res, err, calls)
	}

	calls = 0
	answers = []store.AcquireResult{{Holder: store.Lease{Released: true}}, {Holder: store.Lease{Released: true}}, {Holder: store.Lease{Released: true}}, {Acquired: true}}
	if res, _ := Acquire(context.Background(), req, once); res.Acquired || calls != AcquireAttempts {
		t.Fatalf("Acquire kept trying: %d calls, acquired %t", calls, res.Acquired)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	answers = []store.AcquireResult{{Acquired: true, Epoch: 3}}
	if _, err := Acquire(ctx, req, once); !errors.Is(err, context.Canceled) {
		t.Fatalf("a grant that came after ctx ended = %v, want an error", err)
	}
}
