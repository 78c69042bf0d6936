package tenure_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestPauseRecordsAreNotReportedAsKeys(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		defer a.stop()
		if err := tenure.Pause(context.Background(), st, "telegram"); err != nil {
			t.Fatal(err)
		}
		advance(renew)
		for _, k := range a.PeerKeys() {
			if strings.Contains(k, tenure.PauseSuffix) {
				t.Errorf("PeerKeys lists the pause record %q", k)
			}
		}
		for _, s := range a.Status() {
			if strings.Contains(s.Key, tenure.PauseSuffix) {
				t.Errorf("Status lists the pause record %q (leader %q)", s.Key, s.Leader)
			}
		}
		if !a.KeyStatus("telegram").Paused {
			t.Error("telegram's status does not say it is paused")
		}
	})
}
