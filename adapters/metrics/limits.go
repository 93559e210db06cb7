package metrics

import "github.com/prometheus/client_golang/prometheus"

// ConsumerLimitState is one consumer group's adaptive concurrency limit as
// the limits collector exports it.
type ConsumerLimitState struct {
	// Group is the physical consumer group name (the group label).
	Group string
	// Limit is the concurrent handler calls the group may run now.
	Limit int
	// Decisions counts the limiter's decisions by the signal that chose
	// them.
	Decisions map[string]uint64
}

// ConsumerLimitsSource is what the limits collector reads at scrape time.
// Both methods must be safe for concurrent use and must not block.
type ConsumerLimitsSource interface {
	// ConsumerLimitStates returns every limited group's state.
	ConsumerLimitStates() []ConsumerLimitState
	// Share returns the live instances sharing the global consumer
	// budget (0: not shared) and this instance's share of its budgets (1:
	// not shared).
	Share() (live int, share float64)
}

// RegisterConsumerLimits registers the collector of the adaptive consumer
// limits on reg: the gauge consumer_concurrency_limit{group}, the counter
// consumer_concurrency_decisions_total{group,reason}, and this instance's
// share of the global budget (consumer_concurrency_share) with the live
// instances it is shared by (consumer_concurrency_instances), all read
// from src when scraped.
func RegisterConsumerLimits(reg prometheus.Registerer, src ConsumerLimitsSource) error {
	return reg.Register(limitsCollector{src: src,
		limit: prometheus.NewDesc("consumer_concurrency_limit",
			"Concurrent handler calls the adaptive limiter allows the consumer group now (SECKILL_CONSUMER_LIMITER=adaptive).",
			[]string{"group"}, nil),
		decisions: prometheus.NewDesc("consumer_concurrency_decisions_total",
			"Decisions of the group's adaptive concurrency limiter, by the signal that chose them.",
			[]string{"group", "reason"}, nil),
		share: prometheus.NewDesc("consumer_concurrency_share",
			"Part of its groups' budgets this instance may use under SECKILL_CONSUMER_GLOBAL_BUDGET (1: not shared).", nil, nil),
		peers: prometheus.NewDesc("consumer_concurrency_instances",
			"Live worker instances sharing SECKILL_CONSUMER_GLOBAL_BUDGET at the last heartbeat (0: not shared).", nil, nil),
	})
}

// limitsCollector is the collector RegisterConsumerLimits registers.
type limitsCollector struct {
	src                            ConsumerLimitsSource
	limit, decisions, share, peers *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.limit
	ch <- c.decisions
	ch <- c.share
	ch <- c.peers
}

// Collect implements prometheus.Collector.
func (c limitsCollector) Collect(ch chan<- prometheus.Metric) {
	live, share := c.src.Share()
	ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, share)
	ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, float64(live))
	for _, st := range c.src.ConsumerLimitStates() {
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.Limit), st.Group)
		for reason, n := range st.Decisions {
			ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(n), st.Group, reason)
		}
	}
}
