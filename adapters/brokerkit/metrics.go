package brokerkit

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/ports"
)

// The send outcomes of a publish, the values of mq_publish_total's outcome
// label and of the send_outcome log field (ports/messaging.go says what
// each promises).
const (
	OutcomeConfirmed       = "CONFIRMED"
	OutcomeUnknown         = "UNKNOWN"
	OutcomeDefiniteFailure = "DEFINITE_FAILURE"
)

// Register registers c with reg and returns it; when a collector of the
// same description is registered already (a second publisher or consumer
// of the process) it returns that one, so every adapter instance shares
// one series. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
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

// PublishMetrics are the producer metrics every broker adapter exports,
// with the same names, labels and meaning.
type PublishMetrics struct {
	Total       *prometheus.CounterVec   // mq_publish_total{topic,outcome}
	Latency     *prometheus.HistogramVec // mq_publish_latency_seconds{topic}
	Unknown     *prometheus.CounterVec   // mq_publish_unknown_total{topic}
	Skipped     *prometheus.CounterVec   // mq_publish_skipped_total{topic}
	RetryWindow prometheus.Gauge         // mq_retry_window: the RetryWindow's size
}

// NewPublishMetrics registers the producer metrics with reg.
func NewPublishMetrics(reg prometheus.Registerer) (*PublishMetrics, error) {
	var m PublishMetrics
	var err error
	if m.Total, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_publish_total",
		Help: "Publishes by physical topic and outcome (CONFIRMED, UNKNOWN, DEFINITE_FAILURE).",
	}, []string{"topic", "outcome"})); err != nil {
		return nil, err
	}
	if m.Latency, err = Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mq_publish_latency_seconds",
		Help: "Duration of a bounded synchronous send, whatever its outcome.",
		// 0.5 ms to about 1 s: a loopback send takes about a millisecond
		// and the deadline is tens of milliseconds.
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.Unknown, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_publish_unknown_total",
		Help: "Publishes whose outcome is unknown (timeout, connection loss, server error).",
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.Skipped, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_publish_skipped_total",
		Help: "Publishes not attempted because the circuit breaker was open (the message was not stored).",
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.RetryWindow, err = Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "mq_retry_window",
		Help: "How many retry sends (resends, relay retries) may be outstanding: +1 per answered retry, halved per failed one.",
	})); err != nil {
		return nil, err
	}
	return &m, nil
}

// Observe records one publish of topic in the metrics: its outcome, its
// latency (when elapsed > 0: a send was attempted) and, for UNKNOWN, the
// unknown counter.
func (m *PublishMetrics) Observe(topic, outcome string, elapsed time.Duration) {
	m.Total.WithLabelValues(topic, outcome).Inc()
	if elapsed > 0 {
		m.Latency.WithLabelValues(topic).Observe(elapsed.Seconds())
	}
	if outcome == OutcomeUnknown {
		m.Unknown.WithLabelValues(topic).Inc()
	}
}

// Record records one publish in the metrics (Observe) and writes its
// producer log line (LogPublish).
func (m *PublishMetrics) Record(log *slog.Logger, msg ports.OutboundMessage, topic, outcome, class, brokerID string,
	elapsed time.Duration, err error) {
	m.Observe(topic, outcome, elapsed)
	LogPublish(log, msg, topic, outcome, class, brokerID, elapsed, err)
}

// Reject records a DEFINITE_FAILURE found before any send (class
// INVALID_MESSAGE) and returns its error, wrapping ports.ErrSendRejected
// and err.
func (m *PublishMetrics) Reject(log *slog.Logger, msg ports.OutboundMessage, topic string, err error) error {
	m.Record(log, msg, topic, OutcomeDefiniteFailure, "INVALID_MESSAGE", "", 0, err)
	return fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, topic, ports.ErrSendRejected, err)
}

// ConsumerMetrics are the consumer metrics every broker adapter exports,
// with the same names, labels and meaning.
type ConsumerMetrics struct {
	Total      *prometheus.CounterVec   // mq_consume_total{group,topic,result}
	Process    *prometheus.HistogramVec // mq_consume_process_seconds{topic}
	Inflight   *prometheus.GaugeVec     // mq_consumer_inflight{group}
	AckFailure *prometheus.CounterVec   // mq_ack_failure_total{group}
	Duplicate  *prometheus.CounterVec   // mq_duplicate_message_total{group}
	Reject     *prometheus.CounterVec   // mq_business_reject_total{reason}
}

// NewConsumerMetrics registers the consumer metrics with reg.
func NewConsumerMetrics(reg prometheus.Registerer) (*ConsumerMetrics, error) {
	var m ConsumerMetrics
	var err error
	if m.Total, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_consume_total",
		Help: "Handled deliveries by consumer group, physical topic and result (the handler's decision outcome).",
	}, []string{"group", "topic", "result"})); err != nil {
		return nil, err
	}
	if m.Process, err = Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mq_consume_process_seconds",
		Help:    "Duration of one handler call (one received batch).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"topic"})); err != nil {
		return nil, err
	}
	if m.Inflight, err = Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricConsumerInflight,
		Help: "Messages received and not yet settled (handler running or decision being applied).",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.AckFailure, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_ack_failure_total",
		Help: "Acknowledgements that failed (a transport error, or the broker refused the entry, e.g. an expired receipt handle or a stale delivery tag); the message will be redelivered.",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.Duplicate, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_duplicate_message_total",
		Help: "Deliveries the handler recognised as already processed (outcome \"duplicate\").",
	}, []string{"group"})); err != nil {
		return nil, err
	}
	if m.Reject, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_business_reject_total",
		Help: "Deliveries rejected by business rules (outcome \"rejected\"), by reason.",
	}, []string{"reason"})); err != nil {
		return nil, err
	}
	return &m, nil
}

// Count records the consume metrics of one decision of group for a
// delivery from topic: the result is the decision's outcome, or "ack" /
// "retry" when the handler named none.
func (m *ConsumerMetrics) Count(group, topic string, dec ports.Decision) {
	outcome := dec.Outcome
	if outcome == "" {
		outcome = "ack"
		if !dec.Ack {
			outcome = "retry"
		}
	}
	m.Total.WithLabelValues(group, topic, outcome).Inc()
	switch outcome {
	case "duplicate":
		m.Duplicate.WithLabelValues(group).Inc()
	case "rejected":
		reason := dec.Reason
		if reason == "" {
			reason = "unspecified"
		}
		m.Reject.WithLabelValues(reason).Inc()
	}
}

// NewDeadLetteredCounter registers mq_dead_lettered_total{group}: the
// messages a broker adapter's consumer moved into its group's dead-letter
// queue or topic after the bounded retries (for the adapters whose runner
// does that itself; RocketMQ's broker does it).
func NewDeadLetteredCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mq_dead_lettered_total",
		Help: "Messages a consumer moved into its group's dead-letter queue or topic after the bounded retries.",
	}, []string{"group"}))
}
