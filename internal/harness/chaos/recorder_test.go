package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/memstore"
)

func newRecorder(t *testing.T) (*recorder, *memstore.Store, string) {
	dir := t.TempDir()
	log, err := openLog(filepath.Join(dir, "r1.jsonl"), "r1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.close() })
	ctl := filepath.Join(dir, "r1.ctl")
	if err := setControl(ctl, ""); err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(memstore.Options{})
	return &recorder{inner: mem, log: log, ctl: control(ctl)}, mem, dir
}

func acquire(rec *recorder, key string) (store.AcquireResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	return rec.Acquire(ctx, store.AcquireRequest{Key: key, Owner: "o1", TTL: time.Second, Grace: time.Second})
}

func TestAHeldReplyHidesACommittedAcquisition(t *testing.T) {
	rec, mem, dir := newRecorder(t)
	_ = setControl(string(rec.ctl), "hold")
	if _, err := acquire(rec, "k"); !errors.Is(err, errHeldBack) {
		t.Fatalf("Acquire under hold: %v, want errHeldBack", err)
	}
	ls, _ := mem.List(context.Background(), "")
	if len(ls) != 1 || !ls[0].Live || ls[0].Owner != "o1" {
		t.Fatalf("the held acquisition did not commit: %+v", ls)
	}
	evs, err := readLog(filepath.Join(dir, "r1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Outcome != outCommit || evs[0].Epoch != ls[0].Epoch {
		t.Fatalf("logged %+v; want the committed epoch %d with outcome %q", evs, ls[0].Epoch, outCommit)
	}
}

func TestALostReplyFailsAtOnceAfterTheCallCommitted(t *testing.T) {
	rec, mem, _ := newRecorder(t)
	_ = setControl(string(rec.ctl), "lose")
	start := time.Now()
	if _, err := acquire(rec, "k"); !errors.Is(err, errReplyLost) || !errors.Is(err, errHeldBack) {
		t.Fatalf("Acquire while replies are lost: %v, want errReplyLost (a commit)", err)
	}
	if waited := time.Since(start); waited >= 90*time.Millisecond {
		t.Errorf("a lost reply failed after %v, at its deadline instead of at once", waited)
	}
	ls, _ := mem.List(context.Background(), "")
	if len(ls) != 1 || !ls[0].Live {
		t.Fatalf("the acquisition whose reply was lost did not commit: %+v", ls)
	}
	_ = setControl(string(rec.ctl), "")
	if res, err := acquire(rec, "k"); err != nil || !res.Acquired || res.Epoch <= ls[0].Epoch {
		t.Fatalf("the owner acquiring again after the fault: %+v, %v; want a newer term", res, err)
	}
}

func TestAnUnreachableStoreSeesNothing(t *testing.T) {
	rec, mem, _ := newRecorder(t)
	_ = setControl(string(rec.ctl), "down")
	start := time.Now()
	if _, err := acquire(rec, "k"); !errors.Is(err, errUnreachable) {
		t.Fatalf("Acquire while down: %v, want errUnreachable", err)
	}
	if waited := time.Since(start); waited < 90*time.Millisecond {
		t.Errorf("a call to an unreachable store failed after %v, before its deadline", waited)
	}
	if ls, _ := mem.List(context.Background(), ""); len(ls) != 0 {
		t.Fatalf("a call reached the store through a partition: %+v", ls)
	}
	_ = setControl(string(rec.ctl), "")
	if res, err := acquire(rec, "k"); err != nil || !res.Acquired {
		t.Fatalf("after the partition: %+v, %v", res, err)
	}
}

func TestALogKeepsItsCompleteLinesWhenTheLastOneIsTorn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	body := `{"t":1,"ev":"start","key":"k","epoch":1}` + "\n" + `{"t":2,"ev":"st`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, err := readLog(path)
	if err != nil || len(evs) != 1 || evs[0].Ev != evStart {
		t.Fatalf("readLog: %+v, %v", evs, err)
	}
}

func TestASlowStoreAnswersEveryCallLate(t *testing.T) {
	rec, _, dir := newRecorder(t)
	_ = setControl(string(rec.ctl), "slow 60ms")
	start := time.Now()
	if res, err := acquire(rec, "k"); err != nil || !res.Acquired {
		t.Fatalf("Acquire on a slow store: %+v, %v", res, err)
	}
	if took := time.Since(start); took < 60*time.Millisecond {
		t.Errorf("the call took %v, less than the added round trip", took)
	}
	if _, err := rec.List(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	// A reply later than the caller waits for is lost after the call committed.
	_ = setControl(string(rec.ctl), "slow 180ms")
	if _, err := acquire(rec, "k2"); !errors.Is(err, errHeldBack) {
		t.Fatalf("Acquire slower than its deadline: %v, want errHeldBack", err)
	}
	evs, err := readLog(filepath.Join(dir, "r1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.Ev+":"+e.Outcome)
	}
	if want := []string{"acquire:ok", "list:ok", "acquire:commit"}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
}

// A replica on a store without a push channel (MySQL) must poll, as it
// would in production: its recorder must not look like a watcher.
func TestARecorderWatchesExactlyWhenItsStoreCan(t *testing.T) {
	rec, mem, _ := newRecorder(t)
	if _, ok := record(mem, rec.log, "").(store.Watcher); !ok {
		t.Error("the recorder of a store that watches does not watch")
	}
	noPush := struct{ store.Store }{mem}
	if _, ok := record(noPush, rec.log, "").(store.Watcher); ok {
		t.Error("the recorder of a store without a push channel claims one")
	}
}

// The abandon fault: the key's term is left out of the store call and
// answered lost, the other terms are renewed, and the key cannot be
// acquired meanwhile; the term stays on the store, unreleased.
func TestAnAbandonedKeyIsLeftOutOfRenewalsAndAcquisitions(t *testing.T) {
	rec, mem, dir := newRecorder(t)
	a, _ := acquire(rec, "a")
	b, _ := acquire(rec, "b")
	_ = setControl(string(rec.ctl), "abandon a")
	ok, err := rec.Renew(context.Background(), "o1", time.Second,
		[]store.RenewItem{{Key: "a", Epoch: a.Epoch}, {Key: "b", Epoch: b.Epoch}})
	if err != nil || !slices.Equal(ok, []bool{false, true}) {
		t.Fatalf("Renew while a is abandoned: %v, %v; want [false true]", ok, err)
	}
	if _, err := acquire(rec, "a"); !errors.Is(err, errAbandoned) {
		t.Fatalf("Acquire of the abandoned key: %v, want errAbandoned", err)
	}
	ls, _ := mem.List(context.Background(), "")
	for _, l := range ls {
		if l.Key == "a" && (l.Epoch != a.Epoch || l.Released) {
			t.Fatalf("the abandoned term changed in the store: %+v", l)
		}
	}
	evs, err := readLog(filepath.Join(dir, "r1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var abandoned, renewed []Item
	for _, e := range evs {
		switch e.Ev {
		case evAbandon:
			abandoned = append(abandoned, Item{Key: e.Key, Epoch: e.Epoch})
		case evRenew:
			renewed = append(renewed, e.Items...)
		}
	}
	if !slices.Equal(abandoned, []Item{{Key: "a", Epoch: a.Epoch}}) || !slices.Equal(renewed, []Item{{Key: "b", Epoch: b.Epoch, OK: true}}) {
		t.Fatalf("logged abandoned %+v, renewed %+v; want a's term abandoned and b's alone sent", abandoned, renewed)
	}
	// Alone in a renewal, the abandoned term costs no store call.
	if ok, err := rec.Renew(context.Background(), "o1", time.Second, []store.RenewItem{{Key: "a", Epoch: a.Epoch}}); err != nil || !slices.Equal(ok, []bool{false}) {
		t.Fatalf("Renew of the abandoned term alone: %v, %v", ok, err)
	}
}
