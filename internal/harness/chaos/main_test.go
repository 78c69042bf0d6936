package chaos

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The harness re-executes this test binary as its replicas.
	if IsReplica() {
		os.Exit(ReplicaMain())
	}
	goleak.VerifyTestMain(m)
}
