package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/tenure-dev/tenure"
)

// workerEnv turns a process into a child doing a key's work for a replica
// (childwork.go); it holds a workerSpec (JSON). The lease comes in
// TENURE_KEY, TENURE_EPOCH and TENURE_OWNER, as a command under `tenure
// run` gets it.
const workerEnv = "TENURE_CHAOS_WORKER"

// workerSpec is what a child needs besides its lease.
type workerSpec struct {
	Replica  string        `json:"replica"` // its wrapper, whose log it shares
	Log      string        `json:"log"`
	Resource resourceSpec  `json:"resource"`
	Seed     uint64        `json:"seed"`
	Think    time.Duration `json:"think"`
	LateStop time.Duration `json:"late_stop,omitempty"` // see replicaSpec.LateStop
}

// workerMain is a child's whole life: the in-process workload, run until
// SIGTERM or SIGINT (from its guard), its records carrying its pid and
// appended to its wrapper's log, so that the checker judges its work as
// it judges any runner's.
func workerMain() int {
	// Listening before the start is recorded: a SIGTERM that kills a child
	// silently would leave its work without an end.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runWorker(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker %d: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context) error {
	var spec workerSpec
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &spec); err != nil {
		return fmt.Errorf("%s: %w", workerEnv, err)
	}
	epoch, err := strconv.ParseInt(os.Getenv("TENURE_EPOCH"), 10, 64)
	if err != nil {
		return fmt.Errorf("TENURE_EPOCH: %w", err)
	}
	lease := tenure.Lease{Key: os.Getenv("TENURE_KEY"), Epoch: epoch, Owner: os.Getenv("TENURE_OWNER")}
	log, err := openLog(spec.Log, spec.Replica)
	if err != nil {
		return err
	}
	defer log.close()
	res, err := openResource(ctx, spec.Resource)
	if err != nil {
		return err
	}
	defer res.close()
	pid := os.Getpid()
	w := &workload{log: log, res: res, think: spec.Think, seed: spec.Seed, lateStop: spec.LateStop, pid: pid}
	_ = w.run(ctx, lease)
	log.add(Event{Ev: evWorkerExit, Key: lease.Key, Epoch: lease.Epoch, PID: pid})
	return nil
}
