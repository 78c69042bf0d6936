package etcd

import (
	"testing"

	"go.uber.org/goleak"
)

// Every watcher goroutine and every client a test opens must be gone when
// the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
