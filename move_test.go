package tenure_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenure-dev/tenure"
	"github.com/tenure-dev/tenure/store/memstore"
)

func TestAMoveHandsTheKeyToTheNamedReplicaAndKeepsTheHolderOut(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		var rs []*replica
		for i, name := range []string{"A", "B", "C"} {
			r := newReplica(t, st, name).channels(t).start()
			defer r.stop()
			rs = append(rs, r)
			if i == 0 {
				advance(time.Second) // A takes every key first
			}
		}
		a, b, c := rs[0], rs[1], rs[2]
		wantRunning(t, "A", a, "telegram", "discord", "github")

		from, err := tenure.Move(context.Background(), st, "telegram", "C", time.Minute)
		if err != nil || from != a.Owner() {
			t.Fatalf("Move: from %q, %v; want from A (%s)", from, err, a.Owner())
		}
		advance(renew) // every replica's round
		wantRunning(t, "A", a, "discord", "github")
		wantRunning(t, "B", b, "github")
		wantRunning(t, "C", c, "telegram", "github")
		if n := len(b.rec.startsOf("telegram")); n != 0 {
			t.Fatalf("B started telegram %d times; the move named C", n)
		}
		// C stops telegram: A, moved away, and B, not named, leave it alone
		// while the move lasts.
		c.Set("telegram", tenure.Job{Runner: c.rec.runner("x"), Disabled: true})
		advance(renew)
		if n := len(a.rec.startsOf("telegram")) + len(b.rec.startsOf("telegram")); n != 1 {
			t.Fatalf("telegram started %d times on A and B during the move, want only A's first run", n)
		}
		advance(time.Minute) // the move ends: anyone may take it
		if n := len(a.rec.startsOf("telegram")) + len(b.rec.startsOf("telegram")); n != 2 {
			t.Fatalf("telegram started %d times on A and B after the move ended, want one more", n)
		}
	})
}

func TestAMoveWithoutATargetGoesToAnotherReplica(t *testing.T) {
	bubble(t, func(t *testing.T, st *memstore.Store) {
		a := newReplica(t, st, "A").channels(t).start()
		defer a.stop()
		advance(time.Second)
		b := newReplica(t, st, "B").channels(t).start()
		defer b.stop()
		if _, err := tenure.Move(context.Background(), st, "telegram", "", time.Minute); err != nil {
			t.Fatal(err)
		}
		advance(renew)
		wantRunning(t, "A", a, "discord", "github")
		wantRunning(t, "B", b, "telegram", "github")
		if _, err := tenure.Move(context.Background(), st, "nothing-here", "", 0); err == nil {
			t.Fatal("moving a key nobody holds: nil error")
		}
		if _, err := tenure.Move(context.Background(), st, "telegram", "B", 0); err == nil {
			t.Fatal("moving a key to its holder: nil error")
		}
	})
}
