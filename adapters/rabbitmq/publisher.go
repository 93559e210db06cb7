package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// Send outcomes, the values of the outcome label and of the send_outcome
// log field (the RocketMQ adapter's).
const (
	OutcomeConfirmed       = brokerkit.OutcomeConfirmed
	OutcomeUnknown         = brokerkit.OutcomeUnknown
	OutcomeDefiniteFailure = brokerkit.OutcomeDefiniteFailure
)

// Publisher implements ports.Publisher on RabbitMQ with publisher
// confirms over Config.PublishChannels confirm-mode channels of one
// connection (client recovery on). Each Publish writes one persistent
// message and waits for its confirmation, bounded by min(ctx,
// Config.SendTimeout), and maps the result onto the port's outcomes (see
// confirmChannel.publish): acknowledged = CONFIRMED; a nack on an open
// channel or a context that had ended before the call = DEFINITE_FAILURE
// (ports.ErrSendRejected); a write error, a confirmation lost to a channel
// close or recovery, or a timeout = UNKNOWN (ports.ErrSendUnknown), and a
// timeout before any channel was free to write = UNKNOWN with
// ports.ErrBrokerUnavailable (nothing was written). A send takes the
// first confirm channel no write holds.
//
// Routing: a NORMAL topic's fanout exchange copies the message to each
// group's queue; the FIFO topic's direct exchange routes it to the shard
// Topology.ShardOf(MessageGroup); a DELAY message due later goes first to
// the delay tier chosen for the time left (tierFor) and reaches its topic
// exchange when the tier's TTL dead-letters it. Mandatory returns are not
// used: a message no queue is bound for is kept by the alternate exchange
// (Topology.Unroutable) and the publish is CONFIRMED (the broker stored
// it); UnroutableCount reads how many wait there.
//
// Safe for concurrent use after Start.
type Publisher struct {
	cfg     Config
	topo    Topology
	log     *slog.Logger
	metrics *publisherMetrics
	now     func() time.Time

	mu     sync.RWMutex
	conn   *amqp.Connection
	chans  []*confirmChannel
	closed bool
	stop   chan struct{}
	bg     sync.WaitGroup
	next   atomic.Uint64

	retries *brokerkit.RetryWindow
	// tracer records send spans (nil: tracing off).
	tracer trace.Tracer
}

var (
	_ ports.Publisher    = (*Publisher)(nil)
	_ ports.BrokerHealth = (*Publisher)(nil)
)

// NewPublisher validates cfg, builds the topology it publishes to and
// registers the producer metrics with reg. Call Start before Publish.
func NewPublisher(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	topo, err := NewTopology(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newPublisherMetrics(reg)
	if err != nil {
		return nil, err
	}
	for _, t := range topo.Topics {
		for _, o := range []string{OutcomeConfirmed, OutcomeUnknown, OutcomeDefiniteFailure} {
			m.Total.WithLabelValues(t.Exchange, o)
		}
		m.Unknown.WithLabelValues(t.Exchange)
	}
	p := &Publisher{cfg: cfg, topo: topo, log: log, metrics: m, now: time.Now, stop: make(chan struct{}), retries: brokerkit.NewRetryWindow()}
	m.RetryWindow.Set(float64(p.retries.Size()))
	if cfg.Tracer != nil {
		p.tracer = cfg.Tracer.Tracer(tracerName)
	}
	return p, nil
}

// Topology returns the topology the publisher publishes to.
func (p *Publisher) Topology() Topology { return p.topo }

// Start connects. When the broker cannot be reached it logs it and
// returns nil: the publisher keeps connecting in the background (every
// Config.ReconnectInterval) until it succeeds or Close is called; until
// then Publish fails as UNKNOWN matching ports.ErrBrokerUnavailable and
// BrokerAvailable reports false. ctx bounds the first attempt only.
func (p *Publisher) Start(ctx context.Context) error {
	err := p.connect(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	p.log.Warn("rabbitmq not reachable: the publisher keeps connecting in the background", slog.String("error", err.Error()))
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(p.cfg.ReconnectInterval):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := p.connect(ctx)
			cancel()
			if err == nil {
				p.log.Info("rabbitmq publisher connected")
				return
			}
		}
	}()
	return nil
}

// connect dials and opens the confirm channels.
func (p *Publisher) connect(ctx context.Context) error {
	conn, err := dial(ctx, p.cfg, "seckill-publisher", true)
	if err != nil {
		return err
	}
	chans := make([]*confirmChannel, p.cfg.PublishChannels)
	for i := range chans {
		if chans[i], err = newConfirmChannel(conn); err != nil {
			_ = conn.Close()
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = conn.Close()
		return errors.New("publisher closed")
	}
	p.conn, p.chans = conn, chans
	return nil
}

// Close closes the connection (pending publishes end as UNKNOWN) and
// stops a background connect. Publish afterwards fails as UNKNOWN.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	conn := p.conn
	p.conn, p.chans = nil, nil
	p.mu.Unlock()
	p.bg.Wait()
	if conn == nil {
		return nil
	}
	if err := conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close connection: %w", err)
	}
	return nil
}

// BrokerAvailable implements ports.BrokerHealth: false while the
// publisher has no open connection (not yet connected, or the client is
// recovering it).
func (p *Publisher) BrokerAvailable() (bool, time.Time) {
	p.mu.RLock()
	conn := p.conn
	p.mu.RUnlock()
	if conn == nil || conn.IsClosed() {
		return false, p.now().Add(p.cfg.ReconnectInterval)
	}
	return true, time.Time{}
}

// Publish sends msg and waits for the broker's confirmation, bounded by
// min(ctx, Config.SendTimeout). nil means CONFIRMED; errors match
// ports.ErrSendRejected (DEFINITE_FAILURE: an invalid message, a nack, a
// context ended before Publish was called) or ports.ErrSendUnknown
// (UNKNOWN). Two sends that were never written match
// ports.ErrBrokerUnavailable too: a Retry send when the retry window is
// full (it takes a slot first), and a send whose deadline passed while
// every confirm channel was busy with other writes (a loaded machine, not
// a refusal: the caller keeps the message and sends it again later).
func (p *Publisher) Publish(ctx context.Context, msg ports.OutboundMessage) (ports.SendReceipt, error) {
	spec, err := p.topo.Topic(msg.Topic)
	if err != nil {
		return ports.SendReceipt{}, p.metrics.Reject(p.log, msg, string(msg.Topic), err)
	}
	if err := validate(spec, msg); err != nil {
		return ports.SendReceipt{}, p.metrics.Reject(p.log, msg, spec.Exchange, err)
	}
	now := p.now()
	exchange, key := spec.Exchange, ""
	switch {
	case spec.Kind == ports.TopicOrdered:
		key = strconv.Itoa(p.topo.ShardOf(msg.MessageGroup))
	case !msg.DeliverAt.IsZero() && msg.DeliverAt.After(now):
		exchange, key = p.topo.Tier(tierFor(msg.DeliverAt.Sub(now))), spec.Exchange
	}
	ctx, span := brokerkit.StartSend(ctx, p.tracer, PlugName, spec.Exchange, &msg)
	sendID := newSendID()
	pub := buildPublishing(spec.Exchange, msg, sendID, now)
	outcome, receipt, err := p.send(ctx, spec, msg, exchange, key, pub, sendID)
	brokerkit.EndSend(span, outcome, err)
	return receipt, err
}

// send publishes pub on one of the confirm channels and classifies the
// result (see Publish).
func (p *Publisher) send(ctx context.Context, spec TopicSpec, msg ports.OutboundMessage, exchange, key string, pub amqp.Publishing,
	sendID string) (string, ports.SendReceipt, error) {

	p.mu.RLock()
	chans := p.chans
	p.mu.RUnlock()
	if len(chans) == 0 {
		err := errors.New("publisher not connected (broker not reachable yet) or closed")
		p.metrics.Record(p.log, msg, spec.Exchange, OutcomeUnknown, "NOT_CONNECTED", "", 0, err)
		return OutcomeUnknown, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w: %w", msg.MessageID, spec.Exchange,
			ports.ErrSendUnknown, ports.ErrBrokerUnavailable, err)
	}
	if msg.Retry {
		if !p.retries.Acquire() {
			p.metrics.Skipped.WithLabelValues(spec.Exchange).Inc()
			return OutcomeUnknown, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w (retry window of %d sends full)", msg.MessageID,
				spec.Exchange, ports.ErrSendUnknown, ports.ErrBrokerUnavailable, p.retries.Size())
		}
	}
	ch := pick(chans, p.next.Add(1))
	sendCtx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
	defer cancel()
	start := time.Now()
	outcome, err := ch.publish(sendCtx, exchange, key, pub)
	elapsed := time.Since(start)
	if msg.Retry {
		p.retries.Release(outcome != OutcomeUnknown, outcome == OutcomeUnknown && ctx.Err() == nil)
		p.metrics.RetryWindow.Set(float64(p.retries.Size()))
	}
	class := errorClass(outcome, err)
	switch outcome {
	case OutcomeConfirmed:
		p.metrics.Record(p.log, msg, spec.Exchange, outcome, "", sendID, elapsed, nil)
		return outcome, ports.SendReceipt{BrokerMessageID: sendID}, nil
	case OutcomeDefiniteFailure:
		if errors.Is(err, errChannelBusy) {
			// Never written: like a send the breaker skipped, the
			// caller keeps the message and sends it later (a timeout
			// is UNKNOWN, never a failure).
			p.metrics.Record(p.log, msg, spec.Exchange, OutcomeUnknown, "CHANNEL_BUSY", "", elapsed, err)
			return OutcomeUnknown, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w: %w", msg.MessageID, spec.Exchange,
				ports.ErrSendUnknown, ports.ErrBrokerUnavailable, err)
		}
		p.metrics.Record(p.log, msg, spec.Exchange, outcome, class, "", elapsed, err)
		return outcome, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, spec.Exchange, ports.ErrSendRejected, err)
	default:
		p.metrics.Record(p.log, msg, spec.Exchange, OutcomeUnknown, class, "", elapsed, err)
		return OutcomeUnknown, ports.SendReceipt{}, fmt.Errorf("publish %s to %s: %w: %w", msg.MessageID, spec.Exchange, ports.ErrSendUnknown, err)
	}
}

// pick returns the first channel, from the n-th round-robin, that no
// write holds, or the n-th when every one is busy: a publish waits for a
// channel only when all of them are writing.
func pick(chans []*confirmChannel, n uint64) *confirmChannel {
	for i := range uint64(len(chans)) {
		if ch := chans[(n+i)%uint64(len(chans))]; ch.idle() {
			return ch
		}
	}
	return chans[n%uint64(len(chans))]
}

// UnroutableCount returns how many messages wait in the alternate
// exchange's queue (published to a topic no group queue was bound for).
// It uses a short connection of its own: a channel closed by the
// application while the client recovers a connection breaks that
// connection's recovery (README.md, verified behaviour 11).
func (p *Publisher) UnroutableCount(ctx context.Context) (int, error) {
	conn, err := dial(ctx, p.cfg, "seckill-admin", false)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(p.topo.Unroutable(), true, false, false, false, quorum(nil))
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// validate checks what the ports define as a valid message.
func validate(spec TopicSpec, msg ports.OutboundMessage) error {
	switch {
	case msg.MessageID == "":
		return errors.New("empty message id")
	case len(msg.Body) == 0:
		return errors.New("empty body")
	case msg.MessageGroup != "" && spec.Kind != ports.TopicOrdered:
		return fmt.Errorf("a message group on the %s topic %s", spec.Kind, spec.Topic)
	case msg.MessageGroup == "" && spec.Kind == ports.TopicOrdered:
		return fmt.Errorf("no message group on the FIFO topic %s", spec.Topic)
	case !msg.DeliverAt.IsZero() && spec.Kind != ports.TopicDelayed:
		return fmt.Errorf("a delivery time on the %s topic %s", spec.Kind, spec.Topic)
	}
	return nil
}

// errorClass names a failed send's cause for the error_class log field.
func errorClass(outcome string, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNacked):
		return "NACKED"
	case errors.Is(err, errChannelReset):
		return "CHANNEL_RESET"
	case errors.Is(err, context.DeadlineExceeded):
		return "DEADLINE_EXCEEDED"
	case errors.Is(err, context.Canceled):
		return "CANCELED"
	case outcome == OutcomeUnknown:
		return "WRITE_ERROR"
	}
	return "CLIENT_ERROR"
}

// newSendID returns a random id of one send (the BrokerMessageID of the
// receipt and of the deliveries: RabbitMQ has no message id of its own).
func newSendID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
