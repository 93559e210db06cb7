package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// Health: after healthFailures consecutive sends failed in transport the
// broker is reported unavailable until healthPause after the last one;
// the next send after that is the probe.
const (
	healthFailures = 3
	healthPause    = time.Second
)

// publisher implements ports.Publisher and ports.BrokerHealth on one kgo
// client: acks=all, the idempotent producer, a 1 ms linger.
type publisher struct {
	s       Settings
	cl      *kgo.Client
	timeout time.Duration
	log     *slog.Logger
	metrics *brokerkit.PublishMetrics
	retries *brokerkit.RetryWindow
	tracer  trace.Tracer
	topics  map[ports.Topic]ports.TopicSpec

	mu       sync.Mutex
	failures int
	lastFail time.Time
}

// newPublisher builds the publisher's client (it connects lazily).
func newPublisher(s Settings, d brokerplug.Deps, log *slog.Logger) (*publisher, error) {
	timeout := d.Neutral.SendTimeout
	if timeout <= 0 {
		timeout = defaultSendTimeout
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchMaxBytes(maxRecordBytes+64<<10),
		kgo.UnknownTopicRetries(2))
	if err != nil {
		return nil, err
	}
	m, err := brokerkit.NewPublishMetrics(d.Registerer)
	if err != nil {
		cl.Close()
		return nil, err
	}
	p := &publisher{s: s, cl: cl, timeout: timeout, log: log, metrics: m, retries: brokerkit.NewRetryWindow(),
		topics: map[ports.Topic]ports.TopicSpec{}}
	for _, spec := range ports.TopicSpecs() {
		p.topics[spec.Topic] = spec
		for _, o := range []string{brokerkit.OutcomeConfirmed, brokerkit.OutcomeUnknown, brokerkit.OutcomeDefiniteFailure} {
			m.Total.WithLabelValues(topicName(s.Prefix, spec), o)
		}
	}
	m.RetryWindow.Set(float64(p.retries.Size()))
	if d.Tracer != nil {
		p.tracer = d.Tracer.Tracer(tracerName)
	}
	return p, nil
}

// close closes the client; pending sends end as unknown.
func (p *publisher) close() { p.cl.Close() }

// BrokerAvailable implements ports.BrokerHealth: false for a second after
// three consecutive sends failed in transport.
func (p *publisher) BrokerAvailable() (bool, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures >= healthFailures {
		if at := p.lastFail.Add(healthPause); time.Now().Before(at) {
			return false, at
		}
	}
	return true, time.Time{}
}

// health records a send's transport outcome.
func (p *publisher) health(transportFailure bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if transportFailure {
		p.failures++
		p.lastFail = time.Now()
		return
	}
	p.failures = 0
}

// Publish produces msg and waits for the broker's acknowledgement,
// bounded by min(ctx, the send timeout). nil: stored. ports.ErrSendRejected:
// certainly not stored (an invalid message, a DeliverAt, a refusal of the
// broker that writes nothing). ports.ErrSendUnknown: anything else (a
// deadline, a lost connection): the record may still be written, the
// caller resends with the same MessageID. A Retry send when the retry
// window is full is not attempted (ErrSendUnknown and
// ports.ErrBrokerUnavailable).
func (p *publisher) Publish(ctx context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
	spec, ok := p.topics[msg.Topic]
	if !ok {
		return ports.SendReceipt{}, p.metrics.Reject(p.log, msg, string(msg.Topic), fmt.Errorf("unknown logical topic %q", msg.Topic))
	}
	topic := topicName(p.s.Prefix, spec)
	if err := validate(spec, msg); err != nil {
		return ports.SendReceipt{}, p.metrics.Reject(p.log, msg, topic, err)
	}
	ctx, span := brokerkit.StartSend(ctx, p.tracer, PlugName, topic, &msg)
	rec := buildRecord(topic, msg, time.Now())
	if n := recordSize(rec); n > maxRecordBytes {
		err := p.metrics.Reject(p.log, msg, topic, fmt.Errorf("record of %d bytes, at most %d", n, maxRecordBytes))
		brokerkit.EndSend(span, brokerkit.OutcomeDefiniteFailure, err)
		return ports.SendReceipt{}, err
	}
	if msg.Retry && !p.retries.Acquire() {
		p.metrics.Skipped.WithLabelValues(topic).Inc()
		err := fmt.Errorf("publish %s to %s: %w: %w (retry window of %d sends full)", msg.MessageID, topic,
			ports.ErrSendUnknown, ports.ErrBrokerUnavailable, p.retries.Size())
		brokerkit.EndSend(span, brokerkit.OutcomeUnknown, err)
		return ports.SendReceipt{}, err
	}
	outcome, receipt, err := p.send(ctx, topic, msg, rec)
	brokerkit.EndSend(span, outcome, err)
	return receipt, err
}

// send produces rec and classifies the result.
func (p *publisher) send(ctx context.Context, topic string, msg ports.OutboundMessage, rec *kgo.Record) (string, ports.SendReceipt, error) {
	sctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	start := time.Now()
	err := produceBounded(sctx, p.cl, rec)
	elapsed := time.Since(start)
	outcome, class := classify(err)
	if msg.Retry {
		p.retries.Release(outcome != brokerkit.OutcomeUnknown, outcome == brokerkit.OutcomeUnknown && ctx.Err() == nil)
		p.metrics.RetryWindow.Set(float64(p.retries.Size()))
	}
	p.health(outcome == brokerkit.OutcomeUnknown && ctx.Err() == nil)
	p.metrics.Observe(topic, outcome, elapsed)
	switch outcome {
	case brokerkit.OutcomeConfirmed:
		id := brokerID(rec.Topic, rec.Partition, rec.Offset)
		brokerkit.LogPublish(p.log, msg, topic, outcome, "", id, elapsed, nil)
		return outcome, ports.SendReceipt{BrokerMessageID: id}, nil
	case brokerkit.OutcomeDefiniteFailure:
		brokerkit.LogPublish(p.log, msg, topic, outcome, class, "", elapsed, err)
		return outcome, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, topic, ports.ErrSendRejected, err)
	default:
		brokerkit.LogPublish(p.log, msg, topic, outcome, class, "", elapsed, err)
		return outcome, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, topic, ports.ErrSendUnknown, err)
	}
}

// produceBounded produces rec and returns its result, or ctx's error when
// ctx ends first (the record may still be written later).
func produceBounded(ctx context.Context, cl *kgo.Client, rec *kgo.Record) error {
	done := make(chan error, 1)
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no acknowledgement before the deadline: %w", ctx.Err())
	}
}

// classify maps a produce result to its outcome and error class: the
// broker's refusals that write nothing are definite, everything else
// (deadline, connection, retriable errors, a closed client) unknown.
func classify(err error) (outcome, class string) {
	var ke *kerr.Error
	switch {
	case err == nil:
		return brokerkit.OutcomeConfirmed, ""
	case errors.Is(err, context.DeadlineExceeded):
		return brokerkit.OutcomeUnknown, "DEADLINE_EXCEEDED"
	case errors.Is(err, context.Canceled):
		return brokerkit.OutcomeUnknown, "CANCELED"
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge), errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.InvalidTopicException):
		return brokerkit.OutcomeDefiniteFailure, "BROKER_REFUSED"
	case errors.As(err, &ke):
		return brokerkit.OutcomeUnknown, "BROKER_ERROR"
	}
	return brokerkit.OutcomeUnknown, "TRANSPORT_ERROR"
}

// validate checks what the ports define as a valid message; a DeliverAt is
// refused everywhere (Kafka has no native delay).
func validate(spec ports.TopicSpec, msg ports.OutboundMessage) error {
	switch {
	case msg.MessageID == "":
		return errors.New("empty message id")
	case len(msg.Body) == 0:
		return errors.New("empty body")
	case !msg.DeliverAt.IsZero():
		return errors.New("a delivery time: Kafka has no delayed delivery (the outbox relay holds delayed messages)")
	case msg.MessageGroup != "" && spec.Kind != ports.TopicOrdered:
		return fmt.Errorf("a message group on the %s topic %s", spec.Kind, spec.Topic)
	case msg.MessageGroup == "" && spec.Kind == ports.TopicOrdered:
		return fmt.Errorf("no message group on the FIFO topic %s", spec.Topic)
	}
	return nil
}
