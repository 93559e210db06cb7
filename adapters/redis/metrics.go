package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the adapter's Prometheus metrics (spec 28.2).
//
// reservation_mq_pending and reservation_mq_pending_oldest_age_seconds are
// computed from Store.Stats on every scrape (bounded by
// Config.ScrapeTimeout), so they need no background goroutine and are never
// stale. A failed read is logged and the two gauges are left out of that
// scrape.
type metrics struct {
	store          *Store
	scriptDuration *prometheus.HistogramVec
	pendingDesc    *prometheus.Desc
	oldestAgeDesc  *prometheus.Desc
}

func newMetrics(s *Store) *metrics {
	return &metrics{
		store: s,
		scriptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redis_script_duration_seconds",
			Help:    "Duration of the Redis adapter's Lua script calls, by script.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"script"}),
		pendingDesc: prometheus.NewDesc("reservation_mq_pending",
			"Reservations whose order-create message is not confirmed by the broker yet.", nil, nil),
		oldestAgeDesc: prometheus.NewDesc("reservation_mq_pending_oldest_age_seconds",
			"Age of the oldest reservation whose order-create message is not confirmed yet (0 when none).", nil, nil),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if err := reg.Register(m.scriptDuration); err != nil {
		return fmt.Errorf("redis: register redis_script_duration_seconds: %w", err)
	}
	if err := reg.Register(backlogCollector{m}); err != nil {
		return fmt.Errorf("redis: register reservation_mq_pending collector: %w", err)
	}
	return nil
}

func (m *metrics) observeScript(name string, d time.Duration) {
	m.scriptDuration.WithLabelValues(name).Observe(d.Seconds())
}

// backlogCollector computes the pending gauges from Stats on scrape.
type backlogCollector struct{ m *metrics }

// Describe implements prometheus.Collector.
func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.pendingDesc
	ch <- c.m.oldestAgeDesc
}

// Collect implements prometheus.Collector.
func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.store
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ScrapeTimeout)
	defer cancel()
	st, err := s.Stats(ctx)
	if err != nil {
		s.logger.WarnContext(ctx, "backlog metrics scrape failed", "error", err, "error_class", "redis")
		return
	}
	age := 0.0
	if !st.OldestPendingSendAt.IsZero() {
		age = max(s.now().Sub(st.OldestPendingSendAt).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.m.pendingDesc, prometheus.GaugeValue, float64(st.PendingSend))
	ch <- prometheus.MustNewConstMetric(c.m.oldestAgeDesc, prometheus.GaugeValue, age)
}
