package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the spec 28.2 PostgreSQL metrics (plus the inbox conflict
// counter of spec 14).
type metrics struct {
	txLatency             *prometheus.HistogramVec
	poolWait              prometheus.Histogram
	deadlocks             prometheus.Counter
	serializationFailures prometheus.Counter
	stockMisses           prometheus.Counter
	inboxConflicts        prometheus.Counter
}

// Transaction outcomes, the values of order_tx_latency_seconds' label.
const (
	outcomeCommit   = "commit"
	outcomeRollback = "rollback"
)

func newMetrics() *metrics {
	return &metrics{
		txLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "order_tx_latency_seconds",
			Help:    "Duration of PostgreSQL unit-of-work transactions, from connection acquire to commit or rollback.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"outcome"}),
		poolWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pg_pool_wait_seconds",
			Help:    "Time spent waiting to acquire a PostgreSQL connection from the pool.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .02, .05, .1, .25, .5, 1},
		}),
		deadlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pg_deadlock_total",
			Help: "PostgreSQL deadlocks (SQLSTATE 40P01) seen by the adapter.",
		}),
		serializationFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pg_serialization_retry_total",
			Help: "PostgreSQL serialization failures (SQLSTATE 40001) seen by the adapter; each is returned as transient for a retry.",
		}),
		stockMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inventory_condition_update_miss_total",
			Help: "Conditional final-stock decrements that granted fewer units than requested.",
		}),
		inboxConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inbox_insert_conflict_total",
			Help: "Inbox claims of messages already recorded for the consumer group.",
		}),
	}
}

// register registers the metrics and the pool collector on reg. A nil reg
// registers nothing.
func (m *metrics) register(reg prometheus.Registerer, pool *pgxpool.Pool) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{
		m.txLatency, m.poolWait, m.deadlocks, m.serializationFailures,
		m.stockMisses, m.inboxConflicts, newPoolCollector(pool),
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("postgres: register metrics: %w", err)
		}
	}
	return nil
}

// poolCollector reports the pool's gauges from pgxpool.Stat on every
// scrape.
type poolCollector struct {
	pool     *pgxpool.Pool
	acquired *prometheus.Desc
	total    *prometheus.Desc
}

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	return &poolCollector{
		pool: pool,
		acquired: prometheus.NewDesc("pg_pool_acquired",
			"PostgreSQL connections currently acquired from the pool (in use).", nil, nil),
		total: prometheus.NewDesc("pg_active_connections",
			"PostgreSQL connections currently open by the pool (acquired, idle and being established).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.acquired
	ch <- c.total
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.acquired, prometheus.GaugeValue, float64(st.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(st.TotalConns()))
}
