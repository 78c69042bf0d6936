// Package metrics is a Prometheus collector of what Tenure's supervisors
// do. Create one with New, pass it as Config.Observer and register it:
//
//	m := metrics.New()
//	prometheus.MustRegister(m)
//	sup, err := tenure.New(tenure.Config{Store: st, Observer: m})
//
// One collector may observe several supervisors: it sums their counters
// and histograms. The per-key and per-pool gauges (tenure_key_held,
// tenure_key_running, tenure_pool_*) describe one supervisor: give
// each its own collector, registered with a constant label
// (prometheus.WrapRegistererWith), when one process runs several.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-dev/tenure"
)

// Collector is a tenure.Observer that keeps Prometheus metrics under
// "tenure_", and a prometheus.Collector that exports them.
type Collector struct {
	held     prometheus.Gauge
	renewals *prometheus.CounterVec
	// renewalsBy is renewals' counter of each known outcome, looked up
	// once: Renewal is called per key, 10,000 times a period for a replica
	// holding 10,000 keys. Read-only after New.
	renewalsBy   map[string]prometheus.Counter
	lastRenewal  prometheus.Gauge
	acquisitions prometheus.Counter
	handovers    *prometheus.CounterVec
	deadlines    prometheus.Counter
	starts       *prometheus.CounterVec
	failures     prometheus.Counter
	round        prometheus.Histogram
	renewalTime  prometheus.Histogram
	handoff      prometheus.Histogram
	keyHeld      *prometheus.GaugeVec
	keyRunning   *prometheus.GaugeVec
	poolHeld     *prometheus.GaugeVec
	poolKeys     *prometheus.GaugeVec
	poolFailing  *prometheus.GaugeVec
	poolMember   *prometheus.GaugeVec
	logsDropped  prometheus.Counter

	mu        sync.Mutex
	keys      map[string]keySeries // the keys keyHeld and keyRunning have series for
	keysRound uint64               // calls of Keys so far
}

var _ tenure.Observer = (*Collector)(nil)

// New returns a collector.
func New() *Collector {
	c := &Collector{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tenure_leases_held", Help: "Leases this replica holds.",
		}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_renewals_total", Help: "Lease renewals by outcome (renewed, lost, unconfirmed).",
		}, []string{"outcome"}),
		lastRenewal: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tenure_last_renewal_timestamp_seconds", Help: "When a renewal was last confirmed (Unix time); time() minus it is the age of the newest confirmation.",
		}),
		acquisitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_acquisitions_total", Help: "New lease terms acquired.",
		}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tenure_handovers_total", Help: "Leases that left this replica, by cause: released, rebalance, crash-loop, lost, expired.",
		}, []string{"cause"}),
		deadlines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_deadline_stops_total", Help: "Runners stopped because no renewal was confirmed before the safety deadline.",
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
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tenure_handoff_seconds", Help: "Time from acquiring a new term to its runner starting.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		keyHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_key_held", Help: "1 while this replica holds the singleton key's lease (pool keys: tenure_pool_keys_held).",
		}, []string{"key"}),
		keyRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_key_running", Help: "1 while the singleton key's runner runs on this replica.",
		}, []string{"key"}),
		poolHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_pool_keys_held", Help: "Keys of the pool this replica holds.",
		}, []string{"pool"}),
		poolKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_pool_keys", Help: "Keys the last good read of the pool's source listed.",
		}, []string{"pool"}),
		poolFailing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_pool_source_failing", Help: "1 while the latest read of the pool's key source failed; the last good read's keys stay in force.",
		}, []string{"pool"}),
		poolMember: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tenure_pool_member", Help: "1 while this replica holds its membership of the pool; 0 until it has read the pool's keys once, which no peer shows.",
		}, []string{"pool"}),
		logsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tenure_log_records_dropped_total", Help: "Log records dropped because the log handler did not keep up (it blocked, or fell behind a burst); work never waits for it.",
		}),
		keys: make(map[string]keySeries),
	}
	for _, cause := range []string{tenure.HandoverReleased, tenure.HandoverRebalance, tenure.HandoverCrashLoop, tenure.HandoverLost, tenure.HandoverExpired} {
		c.handovers.WithLabelValues(cause) // every cause exported from the start, at 0
	}
	c.renewalsBy = make(map[string]prometheus.Counter)
	for _, outcome := range []string{"renewed", "lost", "unconfirmed"} {
		c.renewalsBy[outcome] = c.renewals.WithLabelValues(outcome) // exported from the start, at 0
	}
	return c
}

func (m *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.held, m.renewals, m.lastRenewal, m.acquisitions, m.handovers, m.deadlines, m.starts, m.failures,
		m.round, m.renewalTime, m.handoff, m.keyHeld, m.keyRunning, m.poolHeld,
		m.poolKeys, m.poolFailing, m.poolMember, m.logsDropped}
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
func (m *Collector) Renewal(outcome string) {
	c, known := m.renewalsBy[outcome]
	if !known {
		c = m.renewals.WithLabelValues(outcome)
	}
	c.Inc()
	if outcome == "renewed" {
		m.lastRenewal.SetToCurrentTime()
	}
}

// RenewalCall implements tenure.Observer.
func (m *Collector) RenewalCall(d time.Duration) { m.renewalTime.Observe(d.Seconds()) }

// Acquired implements tenure.Observer.
func (m *Collector) Acquired() { m.acquisitions.Inc() }

// Handover implements tenure.Observer.
func (m *Collector) Handover(cause string) { m.handovers.WithLabelValues(cause).Inc() }

// DeadlineStop implements tenure.Observer.
func (m *Collector) DeadlineStop() { m.deadlines.Inc() }

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

// Keys implements tenure.Observer: a series per singleton key, dropped
// when the key is no longer configured. Only values that changed are set:
// with thousands of keys, a lookup of every series every round would cost
// the engine more than its round.
func (m *Collector) Keys(keys []tenure.KeyState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keysRound++
	for _, k := range keys {
		last, known := m.keys[k.Key]
		if !known || last.held != k.Held {
			m.keyHeld.WithLabelValues(k.Key).Set(b2f(k.Held))
		}
		if !known || last.running != k.Running {
			m.keyRunning.WithLabelValues(k.Key).Set(b2f(k.Running))
		}
		m.keys[k.Key] = keySeries{held: k.Held, running: k.Running, round: m.keysRound}
	}
	for k, last := range m.keys {
		if last.round != m.keysRound {
			m.keyHeld.DeleteLabelValues(k)
			m.keyRunning.DeleteLabelValues(k)
			delete(m.keys, k)
		}
	}
}

// keySeries is what a key's series were last set to, and in which call
// of Keys.
type keySeries struct {
	held, running bool
	round         uint64
}

// Pools implements tenure.Observer.
func (m *Collector) Pools(held map[string]int) {
	for pool, n := range held {
		m.poolHeld.WithLabelValues(pool).Set(float64(n))
	}
}

// PoolSources implements tenure.Observer.
func (m *Collector) PoolSources(sources []tenure.PoolSource) {
	for _, s := range sources {
		m.poolKeys.WithLabelValues(s.Pool).Set(float64(s.Keys))
		m.poolFailing.WithLabelValues(s.Pool).Set(b2f(s.Failing))
		m.poolMember.WithLabelValues(s.Pool).Set(b2f(s.Member))
	}
}

// LogRecordsDropped implements tenure.Observer.
func (m *Collector) LogRecordsDropped(n int) { m.logsDropped.Add(float64(n)) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
