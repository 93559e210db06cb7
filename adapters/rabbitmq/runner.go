package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// Defaults of RunnerConfig.
const (
	DefaultBatchSize     = 16
	DefaultDrainTimeout  = 10 * time.Second
	DefaultSettleTimeout = 5 * time.Second
	DefaultRetryBackoff  = time.Second
	DefaultMaxBackoff    = time.Minute
	// batchLinger is how long the runner waits for more prefetched
	// messages to fill a batch after the first one arrived.
	batchLinger = 2 * time.Millisecond
	// maxHold bounds how long a held (ordered or dead-letter) message waits
	// unacknowledged before its requeue: well below the broker's
	// consumer_timeout (30 minutes by default), past which it would close
	// the channel.
	maxHold = 10 * time.Minute
)

// RunnerConfig configures one consumer Runner.
type RunnerConfig struct {
	// Group is the consumer group (one of the topology's groups).
	Group ports.ConsumerGroup
	// BatchSize is the largest number of deliveries per handler call of an
	// unordered group (an ordered group's are always one). Zero means
	// DefaultBatchSize.
	BatchSize int
	// Concurrency is the largest number of concurrent handler calls; the
	// caller derives it from the PostgreSQL pool budget. The prefetch of an
	// unordered group is Concurrency*BatchSize, so no more messages are
	// held unacknowledged than the handlers can take; each shard queue of
	// an ordered group has a prefetch of 1. Required (> 0).
	Concurrency int
	// DrainTimeout bounds graceful stop: after Run's context ends, running
	// handlers get this long before their context is canceled. Zero means
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// SettleTimeout bounds the publish of a retry into a delay tier. Zero
	// means DefaultSettleTimeout.
	SettleTimeout time.Duration
	// RetryBackoff and MaxBackoff shape the delay of a redelivery the
	// handler asked for without RetryAfter: RetryBackoff doubled per
	// earlier delivery, at most MaxBackoff. Zero means DefaultRetryBackoff
	// and DefaultMaxBackoff.
	RetryBackoff, MaxBackoff time.Duration
	// LogAcks logs every acknowledged message at INFO (one line per
	// message; see the RocketMQ runner's RunnerConfig); otherwise they log
	// at DEBUG.
	LogAcks bool
	// AckOneByOne acknowledges each delivery with a basic.ack of its own.
	// False (the default) acknowledges the deliveries of an unordered
	// group's channel with multiple acks (see ackTracker): each one still
	// only after its handler's decision, and never one of a batch whose
	// handler is still running. Ordered groups (prefetch 1) and the
	// dead-letter runner always acknowledge one by one.
	AckOneByOne bool
	// Limit, when set, is an adaptive bound below Concurrency: a batch
	// read from the channel waits for its handler call until fewer than
	// min(Limit.Limit(), Concurrency) calls run, and every call is
	// reported to Limit.Observe (brokerkit.LimitGate). The prefetch stays
	// Concurrency*BatchSize. Nil: Concurrency alone bounds the calls.
	Limit ports.ConcurrencyLimit
}

func (rc RunnerConfig) withDefaults() RunnerConfig {
	if rc.BatchSize <= 0 {
		rc.BatchSize = DefaultBatchSize
	}
	if rc.DrainTimeout <= 0 {
		rc.DrainTimeout = DefaultDrainTimeout
	}
	if rc.SettleTimeout <= 0 {
		rc.SettleTimeout = DefaultSettleTimeout
	}
	if rc.RetryBackoff <= 0 {
		rc.RetryBackoff = DefaultRetryBackoff
	}
	if rc.MaxBackoff <= 0 {
		rc.MaxBackoff = DefaultMaxBackoff
	}
	return rc
}

// source is one queue a Runner consumes.
type source struct {
	queue   string
	shard   int
	ordered bool
	// group is the queue's group (for a dead-letter queue: the group
	// whose dead letters it holds).
	group GroupSpec
	// dead marks a dead-letter queue.
	dead bool
}

// Runner consumes a consumer group's queues (or, built by
// NewDeadLetterRunner, every group's dead-letter queue) and drives a
// ports.BatchHandler with manual acknowledgement:
//
//   - an acknowledging decision acks the delivery (after the handler
//     returned, so after its transaction committed); on an unordered
//     group's channel with one multiple ack per batch where possible,
//     which waits while an earlier delivery of the channel is undecided
//     (see ackTracker, RunnerConfig.AckOneByOne);
//   - a message whose delivery time (a DELAY topic, a retry) is still
//     ahead is not handed to the handler: it is parked in the next delay
//     tier and acked;
//   - unordered group, not acknowledged: on the group's last attempt
//     (DeliveryAttempt >= MaxRetries+1) the delivery is rejected without
//     requeue, which dead-letters it into the group's dead-letter queue;
//     otherwise a copy carrying the attempts so far is parked in the delay
//     tier for RetryAfter (or the backoff), then the delivery is acked (on
//     a failed park it is requeued instead);
//   - ordered group (one shard queue per consumer, single active consumer,
//     prefetch 1), not acknowledged: on the last attempt rejected into
//     the dead-letter queue; otherwise the runner waits RetryAfter (or the
//     backoff) holding the message, which holds its shard but no handler
//     slot, then requeues it at the head of the queue (the quorum queue's
//     delivery limit keeps it there and counts the delivery);
//   - dead-letter queue, not acknowledged: requeued after the backoff.
//
// DeliveryAttempt is the attempts carried by the copy plus the quorum
// queue's x-delivery-count plus one.
type Runner struct {
	cfg     Config
	topo    Topology
	rc      RunnerConfig
	handler ports.BatchHandler
	log     *slog.Logger
	metrics *consumerMetrics
	// ackBatch is mq_ack_batch_messages (see newAckBatchMetric).
	ackBatch *prometheus.HistogramVec
	sources  []source
	name     string

	// origins holds the source of the dead letters being handled (see
	// NewDeadLetterRunner), by dead-letter queue and send id.
	originsMu sync.Mutex
	origins   map[originKey]DeadLetter

	// tracer records a span per processed batch (nil: tracing off).
	tracer trace.Tracer
	// gate holds the handler calls to RunnerConfig.Limit (nil without
	// one: it lets everything in).
	gate *brokerkit.LimitGate
}

// NewRunner returns the runner of group rc.Group of topo.
func NewRunner(cfg Config, topo Topology, rc RunnerConfig, h ports.BatchHandler, log *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
	g, ok := topo.Group(rc.Group)
	if !ok {
		return nil, fmt.Errorf("runner: group %q is not in the topology", rc.Group)
	}
	var srcs []source
	for i, q := range g.Queues {
		srcs = append(srcs, source{queue: q, shard: i, ordered: g.Ordered, group: g})
	}
	return newRunner(cfg, topo, rc, h, log, reg, g.Name, srcs)
}

func newRunner(cfg Config, topo Topology, rc RunnerConfig, h ports.BatchHandler, log *slog.Logger, reg prometheus.Registerer,
	name string, srcs []source) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rc = rc.withDefaults()
	if rc.Concurrency <= 0 {
		return nil, errors.New("runner config: Concurrency must be > 0")
	}
	if h == nil {
		return nil, errors.New("runner: nil handler")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newConsumerMetrics(reg)
	if err != nil {
		return nil, err
	}
	m.AckFailure.WithLabelValues(name)
	m.Duplicate.WithLabelValues(name)
	m.Inflight.WithLabelValues(name)
	m.deadLettered.WithLabelValues(name)
	ackBatch, err := newAckBatchMetric(reg)
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, topo: topo, rc: rc, handler: h, log: log.With(slog.String("consumer_group", name)),
		metrics: m, ackBatch: ackBatch, sources: srcs, name: name, origins: map[originKey]DeadLetter{}}
	if rc.Limit != nil {
		r.gate = brokerkit.NewLimitGate(rc.Limit, rc.Concurrency)
		r.handler = r.gate.Observe(h)
	}
	if cfg.Tracer != nil {
		r.tracer = cfg.Tracer.Tracer(tracerName)
	}
	return r, nil
}

// Run connects (retrying until ctx ends while the broker is unreachable)
// and consumes every queue of the runner until ctx ends. Then it stops
// receiving, lets running handlers finish (their context is canceled
// DrainTimeout later), applies their decisions and closes the connection:
// prefetched messages not yet handed to a handler return to their queue
// (which counts a delivery). It returns nil after a graceful stop.
//
// The runner reconnects on its own instead of using the client's
// connection recovery: after a recovery the client reuses the channel
// objects and their delivery tags restart at 1, so an acknowledgement of
// a delivery received before the failure could settle another message;
// and a channel the application closes while the client recovers makes
// every later recovery attempt fail (README.md, verified behaviour 11).
// With a new connection and new channels per session, a settlement of an
// earlier session's delivery fails harmlessly (the broker has already
// returned that message to its queue).
func (r *Runner) Run(ctx context.Context) error {
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	slots := make(chan struct{}, r.rc.Concurrency)
	var workers sync.WaitGroup
	var last *amqp.Connection
	for ctx.Err() == nil {
		conn, err := dial(ctx, r.cfg, "seckill-consumer-"+r.name, false)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			r.log.Warn("rabbitmq not reachable; retrying", slog.String("error", err.Error()))
			brokerkit.Sleep(ctx, r.cfg.ReconnectInterval)
			continue
		}
		r.session(ctx, handlerCtx, conn, slots, &workers)
		if ctx.Err() != nil {
			last = conn
			break
		}
		_ = conn.Close()
		r.log.Warn("connection lost; reconnecting")
		brokerkit.Sleep(ctx, r.cfg.ReconnectInterval)
	}
	drained := make(chan struct{})
	go func() {
		workers.Wait()
		close(drained)
	}()
	drain := time.NewTimer(r.rc.DrainTimeout)
	defer drain.Stop()
	select {
	case <-drained:
	case <-drain.C:
		r.log.Warn("drain timeout: canceling in-flight handlers", slog.Duration("drain_timeout", r.rc.DrainTimeout))
		cancelHandlers()
		<-drained
	}
	if last != nil {
		_ = last.Close()
	}
	return nil
}

// session consumes every source on conn until ctx ends or the connection
// closes.
func (r *Runner) session(ctx, handlerCtx context.Context, conn *amqp.Connection, slots chan struct{}, workers *sync.WaitGroup) {
	sessCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		select {
		case err := <-closed:
			if err != nil {
				r.log.Warn("connection closed", slog.String("error", err.Error()))
			}
			cancel()
		case <-sessCtx.Done():
		}
	}()
	parker, err := newConfirmChannel(conn)
	if err != nil {
		r.log.Warn("open the retry channel", slog.String("error", err.Error()))
		return
	}
	var loops sync.WaitGroup
	for _, src := range r.sources {
		loops.Add(1)
		go func() {
			defer loops.Done()
			r.consume(sessCtx, handlerCtx, conn, parker, src, slots, workers)
		}()
	}
	loops.Wait()
}

// consumer is one channel consuming one queue.
type consumer struct {
	ch *amqp.Channel
	// acks batches the channel's acknowledgements into multiple acks;
	// nil when each delivery is acknowledged on its own (ordered groups,
	// dead-letter queues, RunnerConfig.AckOneByOne).
	acks *ackTracker
}

// open opens a channel with the source's prefetch and starts consuming.
func (r *Runner) open(ctx context.Context, conn *amqp.Connection, src source) (*consumer, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("open channel: %w", err)
	}
	c := &consumer{ch: ch}
	if !src.ordered && !src.dead && !r.rc.AckOneByOne {
		c.acks = newAckTracker(ch)
	}
	prefetch := r.rc.Concurrency * r.rc.BatchSize
	if src.ordered {
		prefetch = 1
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("qos: %w", err)
	}
	ds, err := ch.ConsumeWithContext(ctx, src.queue, "", false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("consume %s: %w", src.queue, err)
	}
	return c, ds, nil
}

// received is one delivery.
type received struct {
	d amqp.Delivery
}

// consume reads src until ctx ends, reopening its channel when the
// deliveries stop for another reason, and hands batches to workers, each
// holding one of the slots.
func (r *Runner) consume(ctx, handlerCtx context.Context, conn *amqp.Connection, parker *confirmChannel, src source,
	slots chan struct{}, workers *sync.WaitGroup) {
	for ctx.Err() == nil {
		c, ds, err := r.open(ctx, conn, src)
		if err != nil {
			r.log.Warn("consumer start failed; retrying", slog.String("queue", src.queue), slog.String("error", err.Error()))
			if !brokerkit.Sleep(ctx, r.cfg.ReconnectInterval) {
				return
			}
			continue
		}
		r.read(ctx, handlerCtx, c, ds, parker, src, slots, workers)
		if ctx.Err() == nil {
			r.log.Warn("deliveries stopped; reopening the consumer", slog.String("queue", src.queue))
			_ = c.ch.Close()
			brokerkit.Sleep(ctx, r.cfg.ReconnectInterval)
		}
	}
}

// read takes batches from ds until it closes or ctx ends.
func (r *Runner) read(ctx, handlerCtx context.Context, c *consumer, ds <-chan amqp.Delivery, parker *confirmChannel, src source,
	slots chan struct{}, workers *sync.WaitGroup) {
	size := r.rc.BatchSize
	if src.ordered {
		size = 1
	}
	for {
		var first amqp.Delivery
		var ok bool
		select {
		case <-ctx.Done():
			return
		case first, ok = <-ds:
			if !ok {
				return
			}
		}
		batch := []received{{first}}
		linger := time.NewTimer(batchLinger)
	fill:
		for len(batch) < size {
			select {
			case d, ok := <-ds:
				if !ok {
					break fill
				}
				batch = append(batch, received{d})
			case <-linger.C:
				break fill
			}
		}
		linger.Stop()
		select {
		case <-ctx.Done():
			// Not handed to a handler: returned to the queue when the
			// channel closes.
			return
		case slots <- struct{}{}:
		}
		if !r.gate.Enter(ctx) {
			<-slots
			return
		}
		r.track(c, batch)
		r.metrics.Inflight.WithLabelValues(r.name).Add(float64(len(batch)))
		workers.Add(1)
		process := func() {
			defer workers.Done()
			defer r.metrics.Inflight.WithLabelValues(r.name).Sub(float64(len(batch)))
			held := func() []hold {
				defer func() {
					r.gate.Leave()
					<-slots
				}()
				return r.process(ctx, handlerCtx, c, parker, src, batch)
			}()
			// Held messages wait for their redelivery outside the handler
			// slots: they hold their shard, not the PostgreSQL budget.
			for _, h := range held {
				r.requeue(ctx, c, h)
			}
		}
		if src.ordered {
			// One message at a time per shard: the next delivery is read
			// only after this one is settled.
			process()
		} else {
			go process()
		}
	}
}

// process parks what is not due yet, runs the handler on the rest and
// applies its decisions.
func (r *Runner) process(ctx, handlerCtx context.Context, c *consumer, parker *confirmChannel, src source, batch []received) []hold {
	if c.acks != nil {
		// After every settlement of the batch, parks included: what the
		// batch settled may complete the prefix of another batch.
		defer r.flushAcks(c)
	}
	now := time.Now()
	due := batch[:0:0]
	for _, rv := range batch {
		if at := deliverAt(rv.d); !src.dead && at.After(now) {
			r.park(c, parker, src, rv, deliveryAttempt(rv.d)-1, at)
			r.settledAlone(c, rv)
			continue
		}
		due = append(due, rv)
	}
	if len(due) == 0 {
		return nil
	}
	deliveries := make([]ports.Delivery, len(due))
	for i, rv := range due {
		deliveries[i] = toDelivery(rv.d, src.shard)
		if src.dead {
			deliveries[i].Topic = src.queue
			r.setOrigin(src, rv.d, deliveries[i])
		}
	}
	hctx, span := brokerkit.StartProcess(handlerCtx, r.tracer, PlugName, r.name, deliveries)
	start := time.Now()
	decisions := brokerkit.CallHandler(hctx, r.handler, deliveries, r.log)
	if span != nil {
		span.End()
	}
	r.metrics.Process.WithLabelValues(deliveries[0].Topic).Observe(time.Since(start).Seconds())
	if src.dead {
		r.clearOrigins(src, deliveries)
	}
	var held []hold
	for i, rv := range due {
		if h, ok := r.settle(c, parker, src, rv, deliveries[i], decisions[i]); ok {
			held = append(held, h)
		}
	}
	return held
}

// hold is a delivery of an ordered group or of a dead-letter queue that
// is requeued after a delay, held unacknowledged until then.
type hold struct {
	rv    received
	d     ports.Delivery
	dec   ports.Decision
	delay time.Duration
}

// requeue waits h's delay (less when ctx ends) and requeues h's delivery;
// the quorum queue puts it back at the head and counts the delivery.
func (r *Runner) requeue(ctx context.Context, c *consumer, h hold) {
	brokerkit.Sleep(ctx, h.delay)
	err := r.guard(c, h.rv)
	if err == nil {
		err = c.ch.Nack(h.rv.d.DeliveryTag, false, true)
	}
	if err != nil {
		r.metrics.AckFailure.WithLabelValues(r.name).Inc()
		r.abandon(c, err)
	}
	r.logDecision(h.d, h.dec, ackResultRequeued, err)
}

// Values of the ack_result log field.
const (
	ackResultAcked          = "acked"
	ackResultAckFailed      = "ack_failed"
	ackResultRetryScheduled = "retry_scheduled"
	ackResultRetryFailed    = "retry_failed"
	ackResultRequeued       = "requeued"
	ackResultDeadLettered   = "dead_lettered"
)

// settle applies one decision (see Runner). A delivery to requeue after
// a delay (ordered group, dead-letter queue) is returned as a hold for
// the caller, which waits outside the handler slots. On a channel with
// an ackTracker an acknowledgement is only marked ready (the caller's
// flush sends it and logs it); any other settlement marks its tag
// settled once its call has returned.
func (r *Runner) settle(c *consumer, parker *confirmChannel, src source, rv received, d ports.Delivery, dec ports.Decision) (hold, bool) {
	r.count(d, dec)
	if c.acks != nil {
		if dec.Ack {
			if err := c.acks.ready(rv.d.DeliveryTag, ackItem{d: d, dec: dec}); err != nil {
				r.trackerFailed(c, err)
			}
			return hold{}, false
		}
		defer r.settledAlone(c, rv)
	}
	var result string
	var err error
	switch {
	case dec.Ack:
		result, err = ackResultAcked, r.ack(c, rv)
	case !src.dead && int(d.DeliveryAttempt) >= src.group.MaxRetries+1:
		result = ackResultDeadLettered
		if err = r.guard(c, rv); err == nil {
			err = c.ch.Reject(rv.d.DeliveryTag, false)
		}
		if err == nil {
			r.metrics.deadLettered.WithLabelValues(r.name).Inc()
		}
	default:
		delay := dec.RetryAfter
		if delay <= 0 {
			delay = r.backoff(d.DeliveryAttempt)
		}
		if src.ordered || src.dead {
			return hold{rv: rv, d: d, dec: dec, delay: min(delay, maxHold)}, true
		}
		result = ackResultRetryScheduled
		if !r.park(c, parker, src, rv, d.DeliveryAttempt, time.Now().Add(delay)) {
			result = ackResultRetryFailed
		}
	}
	if err != nil {
		if result == ackResultAcked {
			result = ackResultAckFailed
		}
		r.metrics.AckFailure.WithLabelValues(r.name).Inc()
		r.abandon(c, err)
	}
	r.logDecision(d, dec, result, err)
	return hold{}, false
}

// abandon closes c's channel after a settlement failed on it while it
// was open: whatever the channel still holds unacknowledged returns to
// its queue (nothing stays unacknowledged, no shard stays blocked) and the
// consume loop opens a new channel.
func (r *Runner) abandon(c *consumer, cause error) {
	if c.ch.IsClosed() {
		return
	}
	r.log.Warn("settling a delivery failed; closing the channel so that its unacknowledged messages return to the queue",
		slog.String("error", cause.Error()))
	_ = c.ch.Close()
}

// errStaleDelivery is a settlement skipped because the channel closed
// since the delivery: the broker has returned the message to its queue.
var errStaleDelivery = errors.New("the channel closed since the delivery; the broker redelivers it")

// guard refuses to settle a delivery of a closed channel.
func (r *Runner) guard(c *consumer, _ received) error {
	if c.ch.IsClosed() {
		return errStaleDelivery
	}
	return nil
}

// track records the delivery tags of batch on c's tracker, in delivery
// order (the batches of a channel are handed out one after another).
func (r *Runner) track(c *consumer, batch []received) {
	if c.acks == nil {
		return
	}
	tags := make([]uint64, len(batch))
	for i, rv := range batch {
		tags[i] = rv.d.DeliveryTag
	}
	if err := c.acks.track(tags...); err != nil {
		r.trackerFailed(c, err)
	}
}

// settledAlone marks rv's tag settled on c's tracker after the
// individual call that settled it (nack, reject, the ack of a park) has
// returned, successful or not: a failed call closed the channel.
func (r *Runner) settledAlone(c *consumer, rv received) {
	if c.acks == nil {
		return
	}
	if err := c.acks.settled(rv.d.DeliveryTag); err != nil {
		r.trackerFailed(c, err)
	}
}

// trackerFailed handles a tracker refusing a tag (a bug: a tag tracked
// twice or out of order, or settled twice): the channel is closed, so
// the broker redelivers whatever it held unacknowledged and no multiple
// ack can cover a delivery before its decision.
func (r *Runner) trackerFailed(c *consumer, err error) {
	r.log.Error("acknowledgement tracking failed", slog.String("error", err.Error()))
	r.abandon(c, err)
}

// flushAcks sends the multiple ack c's tracker allows (see ackTracker)
// and logs every delivery it acknowledged, or failed to.
func (r *Runner) flushAcks(c *consumer) {
	f := c.acks.flush()
	if len(f.items) == 0 {
		return
	}
	result := ackResultAcked
	if f.sent {
		r.ackBatch.WithLabelValues(r.name).Observe(float64(len(f.items)))
	}
	if f.err != nil {
		result = ackResultAckFailed
		r.metrics.AckFailure.WithLabelValues(r.name).Add(float64(len(f.items)))
		r.abandon(c, f.err)
	}
	for _, it := range f.items {
		r.logDecision(it.d, it.dec, result, f.err)
	}
}

// ack acknowledges one delivery.
func (r *Runner) ack(c *consumer, rv received) error {
	if err := r.guard(c, rv); err != nil {
		return err
	}
	return c.ch.Ack(rv.d.DeliveryTag, false)
}

// park publishes a copy of rv (attempts so far, delivery time at) into
// the delay tier for the time left, addressed to rv's own queue, and acks
// rv once the broker confirmed the copy; when the copy is not confirmed
// rv is requeued instead (a duplicate is possible if the copy was stored
// after all). It reports whether the copy was confirmed.
func (r *Runner) park(c *consumer, parker *confirmChannel, src source, rv received, attempts int32, at time.Time) bool {
	tier := tierFor(time.Until(at))
	ctx, cancel := context.WithTimeout(context.Background(), r.rc.SettleTimeout)
	defer cancel()
	outcome, err := parker.publish(ctx, r.topo.Tier(tier), src.queue, republishing(rv.d, attempts, at))
	if outcome != OutcomeConfirmed {
		r.log.Warn("parking a message in a delay tier failed; requeuing it", slog.String("queue", src.queue),
			slog.String("message_id", rv.d.MessageId), slog.String("error", fmt.Sprint(err)))
		err := r.guard(c, rv)
		if err == nil {
			err = c.ch.Nack(rv.d.DeliveryTag, false, true)
		}
		if err != nil {
			r.abandon(c, err)
		}
		return false
	}
	r.metrics.parked.WithLabelValues(r.name, strconv.FormatInt(tier.Milliseconds(), 10)).Inc()
	if err := r.ack(c, rv); err != nil {
		// The parked copy is stored; the original returns too (a
		// duplicate, which the inbox absorbs).
		r.metrics.AckFailure.WithLabelValues(r.name).Inc()
		r.abandon(c, err)
	}
	return true
}

// backoff is the delay of a redelivery without RetryAfter after attempt.
func (r *Runner) backoff(attempt int32) time.Duration {
	d := r.rc.RetryBackoff
	for i := int32(1); i < attempt && d < r.rc.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.rc.MaxBackoff)
}

// count records the consume metrics of one decision.
func (r *Runner) count(d ports.Delivery, dec ports.Decision) { r.metrics.Count(r.name, d.Topic, dec) }

// logDecision writes the consumer log line of one delivery: debug when
// acknowledged, info otherwise, warn when settling failed.
func (r *Runner) logDecision(d ports.Delivery, dec ports.Decision, result string, err error) {
	brokerkit.LogDecision(r.log, d, dec, result, result == ackResultAcked, r.rc.LogAcks, err)
}
