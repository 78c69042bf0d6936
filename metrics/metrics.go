// Package metrics is a Prometheus collector of what Tenure's supervisors
// do. Create one with New, pass it as Config.Observer and register it:
//
//	m := metrics.New()
//	prometheus.MustRegister(m)
//	sup, err := tenure.New(tenure.Config{Store: st, Observer: m})
//
// One collector may observe several supervisors: it sums them.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-dev/tenure"
)

// Collector is a tenure.Observer that keeps Prometheus metrics under
// "tenure_", and a prometheus.Collector that exports them.
type Collector struct {
	held         prometheus.Gauge
	renewals     *prometheus.CounterVec
	acquisitions prometheus.Counter
	losses       prometheus.Counter
	deadlines    prometheus.Counter
	releases     prometheus.Counter
	starts       *prometheus.CounterVec
	failures     prometheus.Counter
	round        prometheus.Histogram
	renewalTime  prometheus.Histogram
	handoff      prometheus.Histogram
	poolMoves    prometheus.Counter
	crashLoops   prometheus.Counter
}

var _ tenure.Observer = (*Collector)(nil)

// New returns a collector.
func New() *Collector {
	return &Collector{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tenure_leases_held", Help: "Leases this replica holds.",
		}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_renewals_total", Help: "Lease renewals by outcome (renewed, lost, unconfirmed).",
		}, []string{"outcome"}),
		acquisitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_acquisitions_total", Help: "New lease terms acquired.",
		}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_losses_total", Help: "Leases lost because the store refused a renewal.",
		}),
		deadlines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_deadline_stops_total", Help: "Runners stopped because no renewal was confirmed before the safety deadline.",
		}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_releases_total", Help: "Leases released (graceful handoffs).",
		}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_runner_starts_total", Help: "Runner starts; restart=true after a failure.",
		}, []string{"restart"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_runner_failures_total", Help: "Runners that failed to start or returned while holding their lease.",
		}),
		round: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_round_seconds", Help: "Duration of one supervision round (acquisitions, a read of the lease table, pool plans); renewals run on their own schedule.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		renewalTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_renewal_seconds", Help: "Duration of one batched renewal of every lease held, confirmed or not.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		poolMoves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_pool_handovers_total", Help: "Pool keys this replica gave back to rebalance (shed or handed over).",
		}),
		crashLoops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_crash_loop_handovers_total", Help: "Keys handed over to a peer because their runner kept failing (MaxFailures within FailureWindow).",
		}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_handoff_seconds", Help: "Time from acquiring a new term to its runner starting.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
}

func (m *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.held, m.renewals, m.acquisitions, m.losses, m.deadlines, m.releases, m.starts, m.failures, m.round, m.renewalTime, m.handoff, m.poolMoves, m.crashLoops}
}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// LeasesHeld implements tenure.Observer.
func (m *Collector) LeasesHeld(n int) { m.held.Set(float64(n)) }

// Renewal implements tenure.Observer.
func (m *Collector) Renewal(outcome string) { m.renewals.WithLabelValues(outcome).Inc() }

// RenewalCall implements tenure.Observer.
func (m *Collector) RenewalCall(d time.Duration) { m.renewalTime.Observe(d.Seconds()) }

// Acquired implements tenure.Observer.
func (m *Collector) Acquired() { m.acquisitions.Inc() }

// Lost implements tenure.Observer.
func (m *Collector) Lost() { m.losses.Inc() }

// DeadlineStop implements tenure.Observer.
func (m *Collector) DeadlineStop() { m.deadlines.Inc() }

// Released implements tenure.Observer.
func (m *Collector) Released() { m.releases.Inc() }

// RunnerStarted implements tenure.Observer.
func (m *Collector) RunnerStarted(restart bool) {
	label := "false"
	if restart {
		label = "true"
	}
	m.starts.WithLabelValues(label).Inc()
}

// RunnerFailed implements tenure.Observer.
func (m *Collector) RunnerFailed() { m.failures.Inc() }

// Round implements tenure.Observer.
func (m *Collector) Round(d time.Duration) { m.round.Observe(d.Seconds()) }

// Handoff implements tenure.Observer.
func (m *Collector) Handoff(d time.Duration) { m.handoff.Observe(d.Seconds()) }

// PoolHandover implements tenure.Observer.
func (m *Collector) PoolHandover() { m.poolMoves.Inc() }

// CrashLoop implements tenure.Observer.
func (m *Collector) CrashLoop() { m.crashLoops.Inc() }
