package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unsafe"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// startRouteWait bounds how long Start retries a producer start that fails
// with TOPIC_NOT_FOUND for a topic it cannot identify in the error text.
const startRouteWait = 3 * time.Second

// Publisher implements ports.Publisher with one RocketMQ producer: bounded
// synchronous sends (deadline = min(ctx, Config.SendTimeout), exactly one
// attempt) classified into CONFIRMED, UNKNOWN (ports.ErrSendUnknown) and
// DEFINITE_FAILURE (ports.ErrSendRejected). Safe for concurrent use after
// Start.
type Publisher struct {
	cfg     Config
	log     *slog.Logger
	metrics *publisherMetrics
	topics  map[ports.Topic]string

	breaker *breaker
	retries *brokerkit.RetryWindow
	// batch group-commits plain messages (Config.SendBatch); nil sends
	// one message per call through the client library.
	batch *batchSender
	// tracer records send spans (nil: tracing off).
	tracer trace.Tracer

	// mu guards producer; Publish holds it shared for the whole send so
	// that Close waits for in-flight sends before stopping the producer
	// (the library's stop races with a concurrent send otherwise).
	mu       sync.RWMutex
	producer rmq.Producer
	closed   bool

	// stop ends the background start (Start when the broker was not
	// reachable); starting is its goroutine, owned by Close.
	stop     chan struct{}
	starting sync.WaitGroup
}

var (
	_ ports.Publisher    = (*Publisher)(nil)
	_ ports.BrokerHealth = (*Publisher)(nil)
)

// NewPublisher validates cfg, installs the client runtime (see
// InstallRuntime) and registers the producer metrics with reg. Call Start
// before Publish.
func NewPublisher(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := installRuntime(cfg, log); err != nil {
		return nil, err
	}
	m, err := newPublisherMetrics(reg)
	if err != nil {
		return nil, err
	}
	topics := make(map[ports.Topic]string, len(ports.Topics))
	for _, t := range ports.Topics {
		name, err := cfg.Topic(t)
		if err != nil {
			return nil, err
		}
		topics[t] = name
		// Series at zero from the start, so rates over them (the unknown
		// and failure ratios of the alert rules) exist before the first
		// failure.
		for _, o := range []string{OutcomeConfirmed, OutcomeUnknown, OutcomeDefiniteFailure} {
			m.Total.WithLabelValues(name, o)
		}
		m.Unknown.WithLabelValues(name)
	}
	p := &Publisher{cfg: cfg, log: log, metrics: m, topics: topics,
		breaker: newBreaker(cfg.Breaker, cfg.SendTimeout, time.Now), retries: brokerkit.NewRetryWindow(),
		stop: make(chan struct{})}
	if cfg.Tracer != nil {
		p.tracer = cfg.Tracer.Tracer("github.com/seckill-dev/seckill/adapters/rocketmq")
	}
	if cfg.SendBatch > 1 {
		if p.batch, err = newBatchSender(cfg, cfg.SendBatch, m.batchSize); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Start starts the producer (see start). When the broker cannot be
// reached, Start logs it and returns nil: the producer keeps starting in
// the background (retrying every 0.5 s to 5 s) until it succeeds or Close
// is called, and until then Publish attempts nothing and fails as UNKNOWN
// matching ports.ErrBrokerUnavailable, and BrokerAvailable reports false.
// A service can so come up, reserve and answer QUEUING during a broker
// outage. Start must be called once; ctx bounds the first attempt only.
func (p *Publisher) Start(ctx context.Context) error {
	err := p.start(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	p.log.Warn("broker not reachable: the producer keeps starting in the background; sends are skipped until then",
		slog.String("error", err.Error()))
	p.starting.Add(1)
	go func() {
		defer p.starting.Done()
		backoff := newBackoff(500*time.Millisecond, 5*time.Second)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(backoff.next()):
			}
			stopCtx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-p.stop:
					cancel()
				case <-stopCtx.Done():
				}
			}()
			err := p.start(stopCtx)
			cancel()
			if err == nil {
				p.log.Info("producer started")
				return
			}
			p.log.Warn("producer start failed; retrying", slog.String("error", err.Error()))
		}
	}()
	return nil
}

// start starts the producer and preloads the routes of the five topics.
// A topic the proxy reports missing (TOPIC_NOT_FOUND) is left out of the
// preload rather than failing the start, so that Publish to it fails with
// ErrSendRejected while the other topics work; its route is then looked up
// by each send (inside the send's deadline) until the topic exists. Other
// start failures are returned.
func (p *Publisher) start(ctx context.Context) error {
	names := make([]string, 0, len(p.topics))
	for _, t := range ports.Topics {
		names = append(names, p.topics[t])
	}
	deadline := time.Now().Add(startRouteWait)
	for {
		prod, err := p.startProducer(names)
		if err == nil {
			p.setProducer(prod)
			return nil
		}
		// The start error wraps the route error with %v (client.go startUp):
		// only its text tells the cause and the topic.
		msg := err.Error()
		if !strings.Contains(msg, "TOPIC_NOT_FOUND") {
			return fmt.Errorf("start producer: %w", err)
		}
		if missing := missingTopic(msg); missing != "" && slices.Contains(names, missing) {
			p.log.Warn("topic not found; its route will be looked up by each send", slog.String("topic", missing))
			names = slices.DeleteFunc(names, func(n string) bool { return n == missing })
			continue
		}
		if time.Now().After(deadline) {
			p.log.Warn("a topic is missing; starting the producer without preloaded routes", slog.String("error", msg))
			names = nil
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("start producer: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// missingTopic extracts the topic name from the proxy's TOPIC_NOT_FOUND
// message ("... for the topic: <name>"), or "".
func missingTopic(msg string) string {
	const marker = "for the topic: "
	i := strings.LastIndex(msg, marker)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(marker):]
	if j := strings.IndexFunc(rest, unicode.IsSpace); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// startProducer starts a producer that preloads the routes of topics. Start
// errors wrap the route error with %v (client.go startUp), so callers can
// only match its text.
func (p *Publisher) startProducer(topics []string) (rmq.Producer, error) {
	prod, err := rmq.NewProducer(clientConfig(p.cfg, ""),
		rmq.WithTopics(topics...),
		rmq.WithMaxAttempts(1),
		rmq.WithClientFunc(clientFunc(p.cfg)),
	)
	if err != nil {
		return nil, fmt.Errorf("new producer: %w", err)
	}
	initIsolatedEndpoints(prod)
	if err := prod.Start(); err != nil {
		return nil, err
	}
	return prod, nil
}

// setProducer installs prod, or stops it when Close ran meanwhile.
func (p *Publisher) setProducer(prod rmq.Producer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = prod.GracefulStop()
		return
	}
	p.producer = prod
}

// Close waits for in-flight sends (each bounded by its deadline) and stops
// the producer (GracefulStop). Publish afterwards fails with
// ErrSendUnknown. The library keeps a few goroutines and, for up to 30
// minutes of idleness, the gRPC connection of every client it started
// (README.md).
func (p *Publisher) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	prod := p.producer
	p.producer = nil
	p.mu.Unlock()
	p.starting.Wait()
	if p.batch != nil {
		if err := p.batch.Close(); err != nil {
			p.log.Warn("close batch sender", slog.String("error", err.Error()))
		}
	}
	if prod == nil {
		return nil
	}
	if err := prod.GracefulStop(); err != nil {
		return fmt.Errorf("stop producer: %w", err)
	}
	return nil
}

// Publish sends msg synchronously with a deadline of min(ctx, SendTimeout)
// and exactly one attempt. nil means CONFIRMED; errors match
// ports.ErrSendRejected (DEFINITE_FAILURE) or ports.ErrSendUnknown (UNKNOWN)
// as classifySend decides. It sets the tag, the keys, the message group (FIFO
// topic) or the delivery time (DELAY topic), msg.Properties and the
// message_id property.
func (p *Publisher) Publish(ctx context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
	topic, ok := p.topics[msg.Topic]
	if !ok {
		return ports.SendReceipt{}, p.metrics.Reject(p.log, msg, string(msg.Topic), fmt.Errorf("unknown logical topic %q", msg.Topic))
	}
	if err := validateOutbound(msg); err != nil {
		return ports.SendReceipt{}, p.metrics.Reject(p.log, msg, topic, err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	prod := p.producer
	if prod == nil {
		err := errors.New("producer not started (broker not reachable yet) or closed")
		p.metrics.Record(p.log, msg, topic, OutcomeUnknown, "NOT_RUNNING", "", 0, err)
		return ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w: %w", msg.MessageID, topic, ports.ErrSendUnknown,
			ports.ErrBrokerUnavailable, err)
	}

	timeout, probe, admitted, retryAt := p.breaker.admit()
	if !admitted {
		p.metrics.Skipped.WithLabelValues(topic).Inc()
		return ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w (next probe at %s)", msg.MessageID, topic,
			ports.ErrSendUnknown, ports.ErrBrokerUnavailable, retryAt.Format(time.RFC3339Nano))
	}
	if msg.Retry && !probe {
		if !p.retries.Acquire() {
			p.metrics.Skipped.WithLabelValues(topic).Inc()
			return ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w (retry window of %d sends full)", msg.MessageID, topic,
				ports.ErrSendUnknown, ports.ErrBrokerUnavailable, p.retries.Size())
		}
	}
	ctx, span := brokerkit.StartSend(ctx, p.tracer, PlugName, topic, &msg)
	if span != nil {
		defer span.End()
	}
	sendCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var (
		receipts []*rmq.SendReceipt
		err      error
	)
	if p.batch.eligible(msg) {
		var id string
		if id, err = p.batch.send(sendCtx, topic, msg); err == nil {
			receipts = []*rmq.SendReceipt{{MessageID: id}}
		}
	} else {
		receipts, err = prod.Send(sendCtx, buildMessage(topic, msg))
	}
	elapsed := time.Since(start)
	if err == nil && len(receipts) == 0 {
		err = errors.New("send returned no receipt")
	}
	if err != nil && sendCtx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: %w", sendCtx.Err(), err)
	}
	outcome, class := classifySend(err)
	health := healthOf(outcome, ctx.Err())
	p.breaker.record(probe, health, elapsed, timeout)
	if msg.Retry && !probe {
		p.retries.Release(health == resultAnswered, health == resultTransportFailure)
	}
	p.observeBreaker()
	brokerID := ""
	if err == nil {
		brokerID = receipts[0].MessageID
	}
	p.metrics.Record(p.log, msg, topic, outcome, class, brokerID, elapsed, err)
	if span != nil {
		span.SetAttributes(attribute.String("seckill.send_outcome", outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, outcome)
		}
	}
	switch outcome {
	case OutcomeConfirmed:
		return ports.SendReceipt{BrokerMessageID: brokerID}, nil
	case OutcomeDefiniteFailure:
		return ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, topic, ports.ErrSendRejected, err)
	default:
		return ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, topic, ports.ErrSendUnknown, err)
	}
}

// healthOf tells what a send's outcome says about the broker: an answer
// (confirmed or definitely refused), a transport failure, or nothing when
// the caller's own context ended first.
func healthOf(outcome string, callerErr error) sendResult {
	switch {
	case outcome != OutcomeUnknown:
		return resultAnswered
	case callerErr != nil:
		return resultNeutral
	}
	return resultTransportFailure
}

// BrokerAvailable implements ports.BrokerHealth: false while the breaker
// is open (or its one probe is in flight), with the next probe's time.
func (p *Publisher) BrokerAvailable() (bool, time.Time) {
	p.mu.RLock()
	running := p.producer != nil
	p.mu.RUnlock()
	if !running {
		return false, time.Now().Add(500 * time.Millisecond)
	}
	return p.breaker.available()
}

// observeBreaker exports the breaker's state and the adaptive timeout.
func (p *Publisher) observeBreaker() {
	state, timeout := p.breaker.snapshot()
	p.metrics.breaker.WithLabelValues(p.cfg.Endpoint).Set(float64(state))
	p.metrics.timeout.Set(timeout.Seconds())
	p.metrics.RetryWindow.Set(float64(p.retries.Size()))
}

// validateOutbound checks what a message needs before any send.
func validateOutbound(msg ports.OutboundMessage) error {
	if msg.MessageID == "" {
		return errors.New("empty message id")
	}
	if msg.MessageGroup != "" && !msg.DeliverAt.IsZero() {
		return errors.New("a message cannot have both a message group and a delivery time")
	}
	return nil
}

// buildMessage maps an outbound message to the library's message.
func buildMessage(topic string, msg ports.OutboundMessage) *rmq.Message {
	m := &rmq.Message{Topic: topic, Body: msg.Body}
	if msg.Tag != "" {
		m.SetTag(msg.Tag)
	}
	if len(msg.Keys) > 0 {
		m.SetKeys(msg.Keys...)
	}
	if msg.MessageGroup != "" {
		m.SetMessageGroup(msg.MessageGroup)
	}
	if !msg.DeliverAt.IsZero() {
		m.SetDelayTimestamp(msg.DeliverAt)
	}
	for k, v := range msg.Properties {
		m.AddProperty(k, v)
	}
	m.AddProperty(message.PropMessageID, msg.MessageID)
	return m
}

// initIsolatedEndpoints works around a data race in the v5.1.2 client:
// every Send passes the producer's sync.Map of isolated endpoints BY VALUE
// (producer.go takeMessageQueues), and the first heartbeat initialises
// that map lazily (client.go doHeartbeat, LoadAndDelete), so the struct
// copy races with the initialisation (seen with -race in the end-to-end
// tests). Initialising the map before Start, while no goroutine of the
// client exists, leaves nothing to race with: later operations never
// write the copied header again. The field is reached by reflection; if a
// future client renames it, nothing happens.
func initIsolatedEndpoints(prod rmq.Producer) {
	v := reflect.ValueOf(prod)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	f := v.Elem().FieldByName("isolated")
	if !f.IsValid() || f.Type() != reflect.TypeOf(sync.Map{}) || !f.CanAddr() {
		return
	}
	m := (*sync.Map)(unsafe.Pointer(f.UnsafeAddr()))
	m.Range(func(any, any) bool { return false })
}
