package tenure

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-dev/tenure/internal/hold"
)

// Metrics is a Prometheus collector for one or more supervisors. Create it
// with NewMetrics, pass it in Config.Metrics and register it:
//
//	m := tenure.NewMetrics()
//	prometheus.MustRegister(m)
//
// A nil *Metrics records nothing.
type Metrics struct {
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
}

// NewMetrics returns the collector, with metric names under "tenure_".
func NewMetrics() *Metrics {
	return &Metrics{
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
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_handoff_seconds", Help: "Time from acquiring a new term to its runner starting.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.held, m.renewals, m.acquisitions, m.losses, m.deadlines, m.releases, m.starts, m.failures, m.round, m.renewalTime, m.handoff, m.poolMoves}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) setHeld(n int) {
	if m != nil {
		m.held.Set(float64(n))
	}
}

func (m *Metrics) renewal(o hold.Outcome) {
	if m != nil {
		m.renewals.WithLabelValues(o.String()).Inc()
	}
}

func (m *Metrics) acquired() {
	if m != nil {
		m.acquisitions.Inc()
	}
}

func (m *Metrics) loss() {
	if m != nil {
		m.losses.Inc()
	}
}

func (m *Metrics) deadlineStop() {
	if m != nil {
		m.deadlines.Inc()
	}
}

func (m *Metrics) released() {
	if m != nil {
		m.releases.Inc()
	}
}

func (m *Metrics) runnerStarted(restart bool) {
	if m == nil {
		return
	}
	label := "false"
	if restart {
		label = "true"
	}
	m.starts.WithLabelValues(label).Inc()
}

func (m *Metrics) runnerFailed() {
	if m != nil {
		m.failures.Inc()
	}
}

func (m *Metrics) observeRound(d time.Duration) {
	if m != nil {
		m.round.Observe(d.Seconds())
	}
}

func (m *Metrics) observeRenewal(d time.Duration) {
	if m != nil {
		m.renewalTime.Observe(d.Seconds())
	}
}

func (m *Metrics) observeHandoff(d time.Duration) {
	if m != nil {
		m.handoff.Observe(d.Seconds())
	}
}

func (m *Metrics) poolMove() {
	if m != nil {
		m.poolMoves.Inc()
	}
}
