package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// samples are measured durations.
type samples []time.Duration

// quantile returns the nearest-rank q-quantile (0 < q ≤ 1): the smallest
// sample with at least q of the samples at or below it.
func (s samples) quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	rank := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func (s samples) min() time.Duration { return s.quantile(0) }
func (s samples) max() time.Duration { return s.quantile(1) }

func (s samples) mean() time.Duration {
	if len(s) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// report publishes p50, p99 and max as benchmark metrics named
// name-p50-ms and so on, and logs a one-line summary.
func (s samples) report(b *testing.B, name string) {
	b.Helper()
	if len(s) == 0 {
		b.Logf("%s: no samples", name)
		return
	}
	b.ReportMetric(ms(s.quantile(0.5)), name+"-p50-ms")
	b.ReportMetric(ms(s.quantile(0.99)), name+"-p99-ms")
	b.ReportMetric(ms(s.max()), name+"-max-ms")
	b.Logf("%s: n=%d min=%s p50=%s p90=%s p99=%s max=%s mean=%s", name, len(s),
		fmtMS(s.min()), fmtMS(s.quantile(0.5)), fmtMS(s.quantile(0.9)), fmtMS(s.quantile(0.99)),
		fmtMS(s.max()), fmtMS(s.mean()))
}

func fmtMS(d time.Duration) string { return fmt.Sprintf("%.2fms", ms(d)) }

func TestQuantileIsNearestRank(t *testing.T) {
	var s samples
	for i := 1; i <= 200; i++ {
		s = append(s, time.Duration(201-i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Millisecond}, {0.5, 100 * time.Millisecond}, {0.99, 198 * time.Millisecond}, {1, 200 * time.Millisecond}} {
		if got := s.quantile(c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}
