package rocketmq

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// publisherMetrics are the spec 28.2 producer metrics.
type publisherMetrics struct {
	*brokerkit.PublishMetrics                      // the producer metrics of every broker adapter
	breaker                   *prometheus.GaugeVec // mq_breaker_state{endpoint}
	timeout                   prometheus.Gauge     // mq_send_timeout_seconds
	// batchSize is mq_send_batch_messages: messages per SendMessage call
	// of the batch sender.
	batchSize prometheus.Histogram
}

func newPublisherMetrics(reg prometheus.Registerer) (*publisherMetrics, error) {
	shared, err := brokerkit.NewPublishMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := publisherMetrics{PublishMetrics: shared}
	if m.breaker, err = brokerkit.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: brokerkit.MetricBreakerState,
		Help: "The publisher's circuit breaker per endpoint: 0 closed, 1 half-open (probing), 2 open.",
	}, []string{"endpoint"})); err != nil {
		return nil, err
	}
	if m.timeout, err = brokerkit.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: brokerkit.MetricSendTimeout,
		Help: "The adaptive send timeout: four times the smoothed send latency, within the configured bounds.",
	})); err != nil {
		return nil, err
	}
	if m.batchSize, err = brokerkit.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mq_send_batch_messages",
		Help:    "Messages per SendMessage call of the batch sender (SECKILL_SEND_BATCH).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})); err != nil {
		return nil, err
	}
	return &m, nil
}

// consumerMetrics are the spec 28.2 consumer metrics, the same for every
// broker adapter.
type consumerMetrics = brokerkit.ConsumerMetrics

func newConsumerMetrics(reg prometheus.Registerer) (*consumerMetrics, error) {
	return brokerkit.NewConsumerMetrics(reg)
}
