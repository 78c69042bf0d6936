package tenure_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

// A log handler that blocks (a full stderr pipe, a stuck log shipper) must
// not keep a runner going past its safety deadline: the deadline path
// cancels first and never waits on logging or on the supervisor's lock.
func TestAStalledLogSinkNeverDelaysTheDeadlineStop(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var g gate
		runs := &runLog{}
		cut := &partition{Store: st}
		a := newReplica(t, cut, "A", withLogger(g.logger()))
		a.Set("telegram", tenure.Job{Runner: runs.runner("A")})
		a.start()
		b := newReplica(t, st, "B")
		b.Set("telegram", tenure.Job{Runner: runs.runner("B")})
		b.start()
		defer func() {
			g.open()
			a.stop()
			b.stop()
		}()

		advance(renew) // A's renewal at this moment is the last one confirmed
		confirmed := time.Now()
		g.stall()
		cut.cut.Store(true)
		advance(ttl + grace + renew)

		wantNoOverlap(t, runs)
		got := runs.of("telegram")
		if len(got) != 2 || got[0].replica != "A" || got[1].replica != "B" {
			t.Fatalf("runs of telegram: %+v, want A's then B's", got)
		}
		if want := confirmed.Add(ttl - renew); !got[0].ended.Equal(want) || !errors.Is(got[0].cause, tenure.ErrDeadline) {
			t.Fatalf("A's runner stopped at %v with %v, want at %v with ErrDeadline", got[0].ended.Sub(confirmed), got[0].cause, want.Sub(confirmed))
		}
		if earliest := confirmed.Add(ttl + grace); got[1].began.Before(earliest) {
			t.Fatalf("B started %v after A's last renewal, before TTL + grace", got[1].began.Sub(confirmed))
		}
	})
}

// Lease.StopAt lets a runner hand its deadline to work the supervisor
// cannot cancel itself (a child process): it names the moment the context
// is cancelled and signals every confirmed renewal that moves it.
func TestStopAtFollowsEveryConfirmedRenewal(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		leases := make(chan tenure.Lease, 2)
		a := newReplica(t, st, "A")
		runner := tenure.RunnerFunc(func(ctx context.Context, l tenure.Lease) error {
			leases <- l
			<-ctx.Done()
			return nil
		})
		a.Set("telegram", tenure.Job{Runner: runner})
		a.Set("github", tenure.Job{Runner: runner, Mode: tenure.Everywhere})
		granted := time.Now()
		a.start()
		defer a.stop()
		var exclusive, everywhere tenure.Lease
		for range 2 {
			l := <-leases
			if l.Key == "telegram" {
				exclusive = l
			} else {
				everywhere = l
			}
		}
		if _, _, ok := everywhere.StopAt(); ok {
			t.Fatal("an Everywhere run has a lease deadline")
		}
		at, changed, ok := exclusive.StopAt()
		if !ok || !at.Equal(granted.Add(ttl-renew)) {
			t.Fatalf("StopAt = %v, %v; want grant + TTL - RenewEvery", at.Sub(granted), ok)
		}
		advance(renew)
		select {
		case <-changed:
		default:
			t.Fatal("a confirmed renewal did not signal a new StopAt")
		}
		if at, _, _ := exclusive.StopAt(); !at.Equal(granted.Add(renew + ttl - renew)) {
			t.Fatalf("after the renewal StopAt = %v, want renewal + TTL - RenewEvery", at.Sub(granted))
		}
		st.SetFault(func(string) error { return errors.New("unreachable") })
		at, changed, _ = exclusive.StopAt()
		advance(at.Sub(time.Now()))
		select {
		case <-changed:
		default:
			t.Fatal("the deadline stop did not signal")
		}
		if _, ok := a.running()["telegram"]; ok {
			t.Fatal("telegram still runs after its StopAt")
		}
	})
}
