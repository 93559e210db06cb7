package kafka

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// consumerMetrics are the consumer metrics every broker adapter exports,
// plus the Kafka runner's retry and dead-letter counters.
type consumerMetrics struct {
	*brokerkit.ConsumerMetrics
	// retried is mq_retry_scheduled_total{group}: copies written to the
	// group's retry topic, or in-place redeliveries of an ordered group.
	retried *prometheus.CounterVec
	// deadLettered is mq_dead_lettered_total{group} (the RabbitMQ
	// adapter's name): messages written to the group's dead-letter topic.
	deadLettered *prometheus.CounterVec
}

func newConsumerMetrics(reg prometheus.Registerer) (*consumerMetrics, error) {
	shared, err := brokerkit.NewConsumerMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := consumerMetrics{ConsumerMetrics: shared}
	if m.retried, err = brokerkit.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_retry_scheduled_total",
		Help: "Redeliveries a Kafka consumer scheduled (a copy in the group's retry topic, or an in-place retry of an ordered group).",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.deadLettered, err = brokerkit.NewDeadLetteredCounter(reg); err != nil {
		return nil, err
	}
	return &m, nil
}
