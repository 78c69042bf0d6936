package tenure_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestReadinessFollowsTheStoreAndLivenessDoesNot(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		cut := &testenv.Partition{Store: st}
		a := newReplica(t, cut, "A").channels(t)
		if err := a.Live(); !errors.Is(err, tenure.ErrNotRunning) {
			t.Fatalf("Live before Run: %v, want ErrNotRunning", err)
		}
		a.start()
		defer a.stop()
		if err := a.Live(); err != nil {
			t.Fatalf("Live: %v", err)
		}
		if err := a.Ready(); err != nil {
			t.Fatalf("Ready with the store up: %v", err)
		}

		cut.Cut.Store(true) // the store goes away
		advance(renew)
		if err := a.Ready(); err != nil {
			t.Fatalf("Ready one round after the store went: %v; one missed round is tolerated", err)
		}
		advance(2 * renew)
		err := a.Ready()
		if !errors.Is(err, tenure.ErrStoreUnreachable) || !strings.Contains(err.Error(), testenv.ErrPartitioned.Error()) {
			t.Fatalf("Ready with the store down for three rounds: %v, want ErrStoreUnreachable with the store's error", err)
		}
		if err := a.Live(); err != nil {
			t.Fatalf("Live with the store down: %v; the process is fine", err)
		}

		cut.Cut.Store(false)
		advance(renew)
		if err := a.Ready(); err != nil {
			t.Fatalf("Ready once the store is back: %v", err)
		}
	})
}

func TestASingleInstanceSupervisorIsReadyWithoutAStore(t *testing.T) {
	bubble(t, func(t *testing.T, _ *memstore.Store) {
		sup, err := tenure.New(tenure.Config{Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{Supervisor: sup, rec: newRecorder()}
		r.start()
		defer r.stop()
		advance(time.Minute)
		if err := r.Ready(); err != nil {
			t.Fatalf("Ready: %v", err)
		}
	})
}
