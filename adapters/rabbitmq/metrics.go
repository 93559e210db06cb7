package rabbitmq

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// register registers c with reg and returns the collector to use: c, or the
// identical collector registered before (several publishers and runners
// share one registry). A nil reg registers nothing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register metric: %w", err)
	}
	return c, nil
}

// publisherMetrics are the producer metrics, named, labelled and
// described as the RocketMQ adapter's (topic = the topic exchange's name):
// identical descriptors, so that a registry can hold either adapter's and
// the dashboards read both.
type publisherMetrics struct {
	total   *prometheus.CounterVec   // mq_publish_total{topic,outcome}
	latency *prometheus.HistogramVec // mq_publish_latency_seconds{topic}
	unknown *prometheus.CounterVec   // mq_publish_unknown_total{topic}
	skipped *prometheus.CounterVec   // mq_publish_skipped_total{topic}
	// retryWindow is mq_retry_window: the retry budget's current limit.
	retryWindow prometheus.Gauge
}

func newPublisherMetrics(reg prometheus.Registerer) (*publisherMetrics, error) {
	var m publisherMetrics
	var err error
	if m.total, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_publish_total",
		Help: "Publishes by physical topic and outcome (CONFIRMED, UNKNOWN, DEFINITE_FAILURE).",
	}, []string{"topic", "outcome"})); err != nil {
		return nil, err
	}
	if m.latency, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mq_publish_latency_seconds",
		Help:    "Duration of a bounded synchronous send, whatever its outcome.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.unknown, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_publish_unknown_total",
		Help: "Publishes whose outcome is unknown (timeout, connection loss, server error).",
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.skipped, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_publish_skipped_total",
		Help: "Publishes not attempted because the circuit breaker was open (the message was not stored).",
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.retryWindow, err = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mq_retry_window",
		Help: "How many retry sends (resends, relay retries) may be outstanding: +1 per answered retry, halved per failed one.",
	})); err != nil {
		return nil, err
	}
	return &m, nil
}

// consumerMetrics are the consumer metrics, named and labelled as the
// RocketMQ adapter's, plus the RabbitMQ runner's own retry and
// dead-letter counters.
type consumerMetrics struct {
	total      *prometheus.CounterVec   // mq_consume_total{group,topic,result}
	process    *prometheus.HistogramVec // mq_consume_process_seconds{topic}
	inflight   *prometheus.GaugeVec     // mq_consumer_inflight{group}
	ackFailure *prometheus.CounterVec   // mq_ack_failure_total{group}
	duplicate  *prometheus.CounterVec   // mq_duplicate_message_total{group}
	reject     *prometheus.CounterVec   // mq_business_reject_total{reason}
	// parked is mq_delay_parked_total{group,tier}: messages the runner put
	// in a delay tier (a retry or the next hop of a delay).
	parked *prometheus.CounterVec
	// deadLettered is mq_dead_lettered_total{group}: messages the runner
	// rejected into the group's dead-letter queue after its retries.
	deadLettered *prometheus.CounterVec
}

func newConsumerMetrics(reg prometheus.Registerer) (*consumerMetrics, error) {
	var m consumerMetrics
	var err error
	if m.total, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_consume_total",
		Help: "Handled deliveries by consumer group, physical topic and result (the handler's decision outcome).",
	}, []string{"group", "topic", "result"})); err != nil {
		return nil, err
	}
	if m.process, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mq_consume_process_seconds",
		Help:    "Duration of one handler call (one received batch).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.inflight, err = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mq_consumer_inflight",
		Help: "Messages received and not yet settled (handler running or decision being applied).",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.ackFailure, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_ack_failure_total",
		Help: "Acknowledgements that failed (a transport error, or the proxy refused the entry, e.g. an expired receipt handle); the message will be redelivered.",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.duplicate, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_duplicate_message_total",
		Help: "Deliveries the handler recognised as already processed (outcome \"duplicate\").",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.reject, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_business_reject_total",
		Help: "Deliveries rejected by business rules (outcome \"rejected\"), by reason.",
	}, []string{"reason"})); err != nil {
		return nil, err
	}
	if m.parked, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_delay_parked_total",
		Help: "Messages a RabbitMQ consumer put in a delay tier queue (a retry, or the next hop of a delay), by group and tier.",
	}, []string{"group", "tier"})); err != nil {
		return nil, err
	}
	if m.deadLettered, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_dead_lettered_total",
		Help: "Messages a RabbitMQ consumer rejected into its group's dead-letter queue after the bounded retries.",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	return &m, nil
}
