package redis

import (
	"testing"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
)

func TestPruneGoesOnPastTheFirstBatch(t *testing.T) {
	defer func(n int) { prunePage = n }(prunePage)
	prunePage = 3
	testenv.CheckPruneGoesOnPastTheFirstBatch(t, freshStore(t))
}
