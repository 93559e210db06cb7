package rabbitmq

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// publisherMetrics are the producer metrics every broker adapter exports
// (topic = the topic exchange's name), so that the dashboards read either.
type publisherMetrics = brokerkit.PublishMetrics

func newPublisherMetrics(reg prometheus.Registerer) (*publisherMetrics, error) {
	return brokerkit.NewPublishMetrics(reg)
}

// consumerMetrics are the consumer metrics every broker adapter exports,
// plus the RabbitMQ runner's own retry and dead-letter counters.
type consumerMetrics struct {
	*brokerkit.ConsumerMetrics
	// parked is mq_delay_parked_total{group,tier}: messages the runner put
	// in a delay tier (a retry or the next hop of a delay).
	parked *prometheus.CounterVec
	// deadLettered is mq_dead_lettered_total{group}: messages the runner
	// rejected into the group's dead-letter queue after its retries.
	deadLettered *prometheus.CounterVec
}

func newConsumerMetrics(reg prometheus.Registerer) (*consumerMetrics, error) {
	shared, err := brokerkit.NewConsumerMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := consumerMetrics{ConsumerMetrics: shared}
	if m.parked, err = brokerkit.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_delay_parked_total",
		Help: "Messages a RabbitMQ consumer put in a delay tier queue (a retry, or the next hop of a delay), by group and tier.",
	}, []string{"group", "tier"})); err != nil {
		return nil, err
	}
	if m.deadLettered, err = brokerkit.NewDeadLetteredCounter(reg); err != nil {
		return nil, err
	}
	return &m, nil
}
