package chaos

import "testing"

// fakeProcs gives a harness live replicas with the store ids given, in
// spawn order, without starting any process.
func fakeProcs(h *harness, ids ...string) []*proc {
	h.procs = map[string]*proc{}
	var out []*proc
	for i, id := range ids {
		p := &proc{name: id, n: i, exited: make(chan struct{})}
		p.id.Store(&id)
		h.procs[p.name] = p
		out = append(out, p)
	}
	return out
}

// A kill aimed at a key nobody holds hits the holder of another key,
// never a replica that holds nothing: such a kill measures no takeover,
// and a run meant to measure them once measured none.
func TestAKillHitsAHolderEvenWhenItsKeyIsFree(t *testing.T) {
	h := &harness{hist: History{Keys: []string{"k0", "k1"}}}
	ps := fakeProcs(h, "a", "b", "c")
	held := map[string]string{"k0": "b"}
	for pick := range 3 {
		got := h.tryClaim(Step{Fault: FaultKill, Key: 1, Pick: pick}, held)
		if len(got) != 1 || got[0] != ps[1] {
			t.Fatalf("pick %d: kill claimed %v, want the holder b", pick, names(got))
		}
		h.unclaim(got)
	}
}

// With nobody holding anything a kill waits rather than hit a bystander;
// other faults still pick any free replica.
func TestAKillWaitsForAHolder(t *testing.T) {
	h := &harness{hist: History{Keys: []string{"k0"}}}
	fakeProcs(h, "a", "b")
	if got := h.tryClaim(Step{Fault: FaultKill}, map[string]string{}); got != nil {
		t.Fatalf("kill claimed %v with no holder", names(got))
	}
	got := h.tryClaim(Step{Fault: FaultPause, Pick: 1}, map[string]string{})
	if len(got) != 1 || got[0].name != "b" {
		t.Fatalf("pause claimed %v, want b (its pick)", names(got))
	}
}

func names(ps []*proc) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.name)
	}
	return out
}

// An abandon goes to a holder of several keys, whose other terms go on
// being renewed, rather than to the holder of the step's key alone; with
// no such holder, to any holder.
func TestAnAbandonHitsAHolderOfSeveralKeys(t *testing.T) {
	h := &harness{hist: History{Keys: []string{"k0", "k1", "k2"}}}
	ps := fakeProcs(h, "a", "b", "c")
	for pick := range 3 {
		got := h.tryClaim(Step{Fault: FaultAbandon, Key: 0, Pick: pick}, map[string]string{"k0": "a", "k1": "b", "k2": "b"})
		if len(got) != 1 || got[0] != ps[1] {
			t.Fatalf("pick %d: abandon claimed %v, want b (two keys)", pick, names(got))
		}
		h.unclaim(got)
	}
	got := h.tryClaim(Step{Fault: FaultAbandon, Pick: 0}, map[string]string{"k2": "c"})
	if len(got) != 1 || got[0] != ps[2] {
		t.Fatalf("abandon claimed %v, want c, the only holder", names(got))
	}
}
