package postgres

import (
	"testing"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func TestPruneGoesOnPastTheFirstBatch(t *testing.T) {
	defer func(n int) { pruneBatch = n }(pruneBatch)
	pruneBatch = 3
	testenv.CheckPruneGoesOnPastTheFirstBatch(t, tables.New(t))
}
