package chaos

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

// The abandon fault on a real store with sessions: two replicas, three
// keys, so one of them holds two; one step.

func abandonRun(t *testing.T, url string, adjust func(*Options)) *Report {
	t.Helper()
	if testing.Short() {
		t.Skip("runs replicas under a fault for seconds")
	}
	opts := Options{
		Store:    url,
		Duration: time.Second, // one step: it runs to its end once begun
		Replicas: 2,
		Keys:     3,
		Faults:   []string{FaultAbandon},
	}
	return oneStepRun(t, opts, adjust)
}

// The term was on its holder's session when it was abandoned (renewed
// before): the store must take it off for a peer to run the key.
func TestAnAbandonedTermEndsAndAPeerRunsItsKey(t *testing.T) {
	for name, url := range map[string]func(t testing.TB) string{
		"sqlite":   func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "leases.db") },
		"postgres": testenv.Postgres.URL,
		"redis":    testenv.Redis.URL,
		"mysql":    testenv.MySQL.URL,
	} {
		t.Run(name, func(t *testing.T) {
			rep := abandonRun(t, url(t), nil)
			if !rep.OK() {
				t.Fatalf("violations:\n%s", text(rep))
			}
			if a := rep.Abandoned; a.N != 1 || a.Renewed != 1 {
				t.Fatalf("abandoned %+v; want one term, renewed before it was abandoned, checked:\n%s", a, text(rep))
			}
			t.Logf("as expected:\n%s", text(rep))
		})
	}
}

// A store that kept the abandoned term alive with its holder's others —
// here the recorder goes on renewing it behind the engine's back — keeps
// the peer out, and the run says so.
func TestARunCatchesAStoreThatKeepsAnAbandonedTermAlive(t *testing.T) {
	rep := abandonRun(t, "sqlite:"+filepath.Join(t.TempDir(), "leases.db"), func(o *Options) { o.abandonedLivesOn = true })
	if len(violations(rep, InvAbandoned)) == 0 {
		t.Fatalf("an abandoned term kept alive went unnoticed:\n%s", text(rep))
	}
	if len(violations(rep, InvAbandoned)) != len(rep.Violations) {
		t.Errorf("other violations besides %q:\n%s", InvAbandoned, text(rep))
	}
}
