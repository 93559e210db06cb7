package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// Defaults of RunnerConfig.
const (
	DefaultBatchSize         = 16
	DefaultInvisibleDuration = 30 * time.Second
	DefaultAwaitDuration     = 5 * time.Second
	DefaultAckTimeout        = 3 * time.Second
	DefaultDrainTimeout      = 10 * time.Second
	DefaultStartTimeout      = 10 * time.Second
	// MaxBatchSize is the proxy's cap on messages per receive
	// (ProxyUtils.MAX_MSG_NUMS_FOR_POP_REQUEST).
	MaxBatchSize = 32
)

// RunnerConfig configures one consumer Runner.
type RunnerConfig struct {
	// Group is the physical consumer group name (Config.Group).
	Group string
	// Subscriptions maps physical topic names to a tag filter expression
	// ("tagA||tagB"; "" or "*" for every tag). At least one.
	Subscriptions map[string]string
	// Orderly marks a FIFO subscription (the group must have been created
	// with consumeMessageOrderly). Decisions are then applied so that a
	// message group's order survives a failure (see Runner).
	Orderly bool
	// BatchSize is the maximum number of messages per receive and per
	// handler call, 1..32. Zero means DefaultBatchSize.
	BatchSize int
	// Concurrency is the maximum number of concurrent handler calls; the
	// caller derives it from the PostgreSQL pool budget. Required (> 0).
	Concurrency int
	// InvisibleDuration is how long a received message stays invisible to
	// other receives; the runner renews it every half period while the
	// handler runs. It must be at least the proxy's
	// minInvisibleTimeMillsForRecv (10 s by default, 1 s on the local
	// stack). Zero means DefaultInvisibleDuration.
	InvisibleDuration time.Duration
	// AwaitDuration is the long-polling time of an empty receive (the proxy
	// waits about AwaitDuration + 1.5 s, clamped to its limits). Zero means
	// DefaultAwaitDuration.
	AwaitDuration time.Duration
	// AckTimeout bounds one acknowledgement; acknowledgements never use the
	// (possibly canceled) run context. Zero means DefaultAckTimeout.
	AckTimeout time.Duration
	// DrainTimeout bounds graceful stop: after Run's context is canceled,
	// in-flight handlers get this long before their context is canceled.
	// Zero means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// LogAcks logs every acknowledged message at INFO (one line per
	// message: an opt-in for a quiet group, too many lines for the
	// order-create group of a sale); otherwise acknowledged messages log at
	// DEBUG and only failures, retries and refusals at INFO or above.
	LogAcks bool
	// StartTimeout is the period after the consumer started during which
	// "settings not ready" receive errors are expected (and not logged as
	// failures). Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// RouteRefresh is how often the runner reads its topics' routes from the
	// proxy to learn which brokers to receive from (one receive loop per
	// broker, see Runner). Zero means DefaultRouteRefresh.
	RouteRefresh time.Duration
	// Limit, when set, is an adaptive bound below Concurrency: a receive
	// starts only while fewer than min(Limit.Limit(), Concurrency) handler
	// calls (and receives) are in flight, and every handler call is
	// reported to Limit.Observe. A raised limit is seen when a call ends or
	// within 50 ms. Nil: Concurrency alone bounds the calls.
	Limit ports.ConcurrencyLimit
}

func (rc RunnerConfig) withDefaults() RunnerConfig {
	if rc.BatchSize <= 0 {
		rc.BatchSize = DefaultBatchSize
	}
	if rc.InvisibleDuration <= 0 {
		rc.InvisibleDuration = DefaultInvisibleDuration
	}
	if rc.AwaitDuration <= 0 {
		rc.AwaitDuration = DefaultAwaitDuration
	}
	if rc.AckTimeout <= 0 {
		rc.AckTimeout = DefaultAckTimeout
	}
	if rc.DrainTimeout <= 0 {
		rc.DrainTimeout = DefaultDrainTimeout
	}
	if rc.StartTimeout <= 0 {
		rc.StartTimeout = DefaultStartTimeout
	}
	if rc.RouteRefresh <= 0 {
		rc.RouteRefresh = DefaultRouteRefresh
	}
	return rc
}

func (rc RunnerConfig) validate() error {
	switch {
	case rc.Group == "":
		return errors.New("runner config: empty Group")
	case len(rc.Subscriptions) == 0:
		return errors.New("runner config: no Subscriptions")
	case rc.Concurrency <= 0:
		return errors.New("runner config: Concurrency must be > 0")
	case rc.BatchSize > MaxBatchSize:
		return fmt.Errorf("runner config: BatchSize %d exceeds %d", rc.BatchSize, MaxBatchSize)
	case rc.InvisibleDuration < time.Second:
		return fmt.Errorf("runner config: InvisibleDuration %v below 1 s", rc.InvisibleDuration)
	}
	return nil
}

// Runner drives one SimpleConsumer and a ports.BatchHandler.
//
// It long-polls Receive for up to BatchSize messages, but only when one of
// its Concurrency handler slots is free (and, with a Limit, fewer calls
// than Limit are in flight), so at most Concurrency handler calls run at
// once and no message waits unprocessed while its invisible
// duration runs. It receives from every broker that serves its topics at
// once: one receive loop per broker named by the proxy's route of the
// topics (read every RouteRefresh), each asking the proxy for its broker's
// messages, so a broker with nothing ready (a receive then long-polls it)
// never holds up the receives from another, and a broker that comes back
// is received from within RouteRefresh of the proxy routing it again
// (brokers.go says why the client library alone takes up to a minute).
// When the route cannot be read, one loop receives from the queues the
// client library picks. While a handler runs, the invisible duration of its
// messages is renewed every InvisibleDuration/2. Then each decision is
// applied: Ack acknowledges (with its own AckTimeout); RetryAfter > 0
// changes the invisible duration to RetryAfter; anything else leaves the
// message to reappear when its invisible duration ends. Every redelivery
// increments Delivery.DeliveryAttempt; when it would exceed the group's
// retryMaxTimes+1 the broker moves the message to %DLQ%<group>.
//
// Orderly (FIFO) subscriptions: the proxy hands out consecutive messages of
// a queue and locks the queue until they are all acknowledged or their
// invisible duration ends, so no two in-flight batches share a message
// group and batches may run concurrently. Within a batch, the deliveries are
// given to the handler in queue order; once the decision on a message of a
// message group does not acknowledge it, the later messages of the same
// group in the batch are not acknowledged either (they get the same
// RetryAfter), so the group is redelivered from the failed message on, in
// order. The acknowledgements go in one call per topic (unless
// Config.AckOneByOne); one that fails on the broker brings its message
// back with the rest of its queue. (The broker redelivers
// the whole queue from its first unacknowledged offset, acknowledged
// messages of other groups included: FIFO handlers must be idempotent.)
type Runner struct {
	cfg     Config
	rc      RunnerConfig
	handler ports.BatchHandler
	log     *slog.Logger
	metrics *consumerMetrics
	// acker carries the batch acknowledgements (nil: one call per message
	// through the library). Set by Run before its workers start.
	acker *protoConn
	// routes reads the topics' routes (nil: the client library picks the
	// queue of every receive). Set by Run.
	routes *protoConn
	// tracer records a span per processed batch (nil: tracing off).
	tracer trace.Tracer
	// gate holds the calls to RunnerConfig.Limit (nil without one).
	gate *brokerkit.LimitGate
}

// NewRunner validates the configuration, installs the client runtime and
// registers the consumer metrics with reg.
func NewRunner(cfg Config, rc RunnerConfig, handler ports.BatchHandler, log *slog.Logger, reg prometheus.Registerer) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rc = rc.withDefaults()
	if err := rc.validate(); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, errors.New("runner: nil handler")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := installRuntime(cfg, log); err != nil {
		return nil, err
	}
	m, err := newConsumerMetrics(reg)
	if err != nil {
		return nil, err
	}
	// The group's series exist at zero from the start (an ack-failure
	// ratio needs its numerator before the first failure).
	m.AckFailure.WithLabelValues(rc.Group)
	m.Duplicate.WithLabelValues(rc.Group)
	m.Inflight.WithLabelValues(rc.Group)
	r := &Runner{cfg: cfg, rc: rc, handler: handler, log: log.With(slog.String("consumer_group", rc.Group)), metrics: m}
	if rc.Limit != nil {
		r.gate = brokerkit.NewLimitGate(rc.Limit, rc.Concurrency)
		r.handler = r.gate.Observe(handler)
	}
	if cfg.Tracer != nil {
		r.tracer = cfg.Tracer.Tracer("github.com/seckill-dev/seckill/adapters/rocketmq")
	}
	return r, nil
}

// Run starts the consumer and processes messages until ctx is canceled.
// Then it stops receiving, lets the in-flight handlers finish (their context
// is canceled DrainTimeout later), applies their decisions (a message is
// acknowledged only when its handler returned an acknowledging decision),
// stops the consumer and returns nil. It returns an error if the consumer
// cannot be created (invalid configuration); one that cannot reach the
// broker keeps trying until ctx ends. Run must be called once.
func (r *Runner) Run(ctx context.Context) error {
	consumer, err := r.start(ctx)
	if err != nil {
		return err
	}
	if conn, err := dialProto(r.cfg, "consumer"); err != nil {
		r.log.Warn("proxy connection unavailable; acknowledging one message per call and receiving from the queues the client library picks",
			slog.String("error", err.Error()))
	} else {
		defer conn.Close() // after every batch is settled (deferred first, runs last)
		r.routes = conn
		if !r.cfg.AckOneByOne {
			r.acker = conn
		}
	}
	// Consumers replaced after a proxy restart stop once their in-flight
	// batches are settled; Run waits for them before it returns.
	var retired sync.WaitGroup
	defer retired.Wait()
	stop := func(c rmq.SimpleConsumer) {
		if err := c.GracefulStop(); err != nil {
			r.log.Warn("stop consumer", slog.String("error", err.Error()))
		}
	}

	// handlerCtx outlives ctx by DrainTimeout so handlers can finish.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()

	slots := make(chan struct{}, r.rc.Concurrency)
	var workers sync.WaitGroup
	for {
		var own sync.WaitGroup // this consumer's in-flight batches
		if !r.receiveLoop(ctx, handlerCtx, consumer, slots, &workers, &own) {
			break
		}
		// The proxy lost this client's settings (it restarted): a new
		// consumer makes a new telemetry handshake at once, instead of
		// waiting for the library to resend them.
		r.log.Warn("the proxy lost the consumer's settings; restarting the consumer")
		old := consumer
		retired.Add(1)
		go func() {
			defer retired.Done()
			own.Wait()
			stop(old)
		}()
		if consumer, err = r.start(ctx); err != nil {
			consumer = nil
			break
		}
	}
	if consumer != nil {
		defer stop(consumer)
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
	return nil
}

// start creates and starts the consumer, retrying (0.5 s to 5 s apart)
// until it starts or ctx ends: a broker that is down when the service
// starts delays its consumers, it does not stop the service.
func (r *Runner) start(ctx context.Context) (rmq.SimpleConsumer, error) {
	subs := make(map[string]*rmq.FilterExpression, len(r.rc.Subscriptions))
	for topic, expr := range r.rc.Subscriptions {
		if expr == "" {
			expr = "*"
		}
		subs[topic] = rmq.NewFilterExpression(expr)
	}
	backoff := newBackoff(500*time.Millisecond, 5*time.Second)
	for {
		consumer, err := rmq.NewSimpleConsumer(clientConfig(r.cfg, r.rc.Group),
			rmq.WithAwaitDuration(r.rc.AwaitDuration),
			rmq.WithSubscriptionExpressions(subs),
			rmq.WithClientFuncForSimpleConsumer(clientFunc(r.cfg)),
		)
		if err != nil {
			return nil, fmt.Errorf("new consumer %s: %w", r.rc.Group, err)
		}
		err = consumer.Start()
		if err == nil {
			return consumer, nil
		}
		r.log.Warn("consumer start failed; retrying", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("start consumer %s: %w", r.rc.Group, ctx.Err())
		case <-time.After(backoff.next()):
		}
	}
}

// receiveLoop receives batches while ctx is alive, with one receive loop
// (receiveFrom) per broker that serves the subscribed topics; the brokers
// are read from the proxy's routes every RouteRefresh, a loop starts for a
// broker that appears and a loop whose broker left the route ends after its
// current receive. Until a route was read (or without a proxy connection)
// one loop receives from the queues the client library picks.
//
// It returns true when the proxy no longer knows the consumer's settings
// past the start grace (a restarted proxy): the caller replaces the
// consumer; false when ctx ended.
func (r *Runner) receiveLoop(ctx, handlerCtx context.Context, consumer rmq.SimpleConsumer, slots chan struct{}, workers, own *sync.WaitGroup) bool {
	settingsGrace := time.Now().Add(r.rc.StartTimeout)
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	topics := slices.Sorted(maps.Keys(r.rc.Subscriptions))

	var (
		mu      sync.Mutex
		wanted  = map[string]bool{} // the loops that should run: broker names, "" for the library's choice
		running = map[string]bool{}
		loops   sync.WaitGroup
		restart atomic.Bool
	)
	stillWanted := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		if wanted[key] {
			return true
		}
		delete(running, key)
		return false
	}
	apply := func(keys []string) {
		mu.Lock()
		defer mu.Unlock()
		next := make(map[string]bool, len(keys))
		for _, k := range keys {
			next[k] = true
		}
		if !maps.Equal(next, wanted) && !(len(keys) == 1 && keys[0] == "") {
			r.log.Info("receiving from brokers", slog.Any("brokers", keys))
		}
		wanted = next
		for _, k := range keys {
			if running[k] {
				continue
			}
			running[k] = true
			loops.Add(1)
			go func() {
				defer loops.Done()
				if r.receiveFrom(loopCtx, handlerCtx, consumer, k, stillWanted, settingsGrace, slots, workers, own) {
					restart.Store(true)
					stopLoops()
				}
			}()
		}
	}
	routeFailed := false
	brokers := func() []string {
		if r.routes == nil {
			return nil
		}
		rctx, cancel := context.WithTimeout(loopCtx, r.cfg.RequestTimeout)
		defer cancel()
		bs, err := r.routes.readableBrokers(rctx, topics)
		switch {
		case err != nil && loopCtx.Err() == nil:
			if !routeFailed {
				r.log.Warn("read the topics' routes; receiving from the brokers known so far", slog.String("error", err.Error()))
			}
			routeFailed = true
			return nil
		case err != nil:
			return nil
		}
		routeFailed = false
		return bs
	}
	if bs := brokers(); len(bs) > 0 {
		apply(bs)
	} else {
		apply([]string{""})
	}
	tick := time.NewTicker(r.rc.RouteRefresh)
	defer tick.Stop()
	for {
		select {
		case <-loopCtx.Done():
			loops.Wait()
			return restart.Load() && ctx.Err() == nil
		case <-tick.C:
			if bs := brokers(); len(bs) > 0 {
				apply(bs)
			}
		}
	}
}

// receiveFrom is one receive loop: it receives batches from broker (the
// client library's choice when broker is "") while ctx is alive, a slot is
// free and wanted(broker) holds, and hands each batch to a worker goroutine
// that holds the slot. It returns true when the proxy no longer knows the
// consumer's settings past settingsGrace.
func (r *Runner) receiveFrom(ctx, handlerCtx context.Context, consumer rmq.SimpleConsumer, broker string, wanted func(string) bool,
	settingsGrace time.Time, slots chan struct{}, workers, own *sync.WaitGroup) bool {
	rctx, log := ctx, r.log
	if broker != "" {
		rctx, log = withBrokerTarget(ctx, broker), r.log.With(slog.String("broker", broker))
	}
	// Receive failures back off to at most 1 s: after a proxy restart the
	// consumers are back within a second of it.
	backoff := newBackoff(100*time.Millisecond, time.Second)
	release := func() {
		r.gate.Leave()
		<-slots
	}
	for {
		if !wanted(broker) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case slots <- struct{}{}:
		}
		if !r.gate.Enter(ctx) {
			<-slots
			return false
		}
		if !wanted(broker) {
			release()
			return false
		}
		views, err := consumer.Receive(rctx, int32(r.rc.BatchSize), r.rc.InvisibleDuration)
		if err != nil {
			release()
			if ctx.Err() != nil {
				return false
			}
			if settingsLost(err) && !time.Now().Before(settingsGrace) {
				return true
			}
			wait := r.receiveError(log, err, settingsGrace, backoff)
			if wait > 0 && !brokerkit.Sleep(ctx, wait) {
				return false
			}
			continue
		}
		backoff.reset()
		if len(views) == 0 {
			release()
			continue
		}
		r.metrics.Inflight.WithLabelValues(r.rc.Group).Add(float64(len(views)))
		workers.Add(1)
		own.Add(1)
		go func() {
			defer workers.Done()
			defer own.Done()
			defer release()
			defer r.metrics.Inflight.WithLabelValues(r.rc.Group).Sub(float64(len(views)))
			r.process(handlerCtx, consumer, views)
		}()
	}
}

// settingsLost reports whether err is the proxy's answer to a receive
// from a client whose settings it does not have.
func settingsLost(err error) bool {
	var rs *rmq.ErrRpcStatus
	return errors.As(err, &rs) && rs.Code == int32(v2.Code_INTERNAL_SERVER_ERROR) && strings.Contains(rs.Message, "settings")
}

// receiveError logs a receive error and returns how long to wait before the
// next receive.
func (r *Runner) receiveError(log *slog.Logger, err error, settingsGrace time.Time, b *backoff) time.Duration {
	var rs *rmq.ErrRpcStatus
	if errors.As(err, &rs) {
		switch {
		case rs.Code == int32(v2.Code_MESSAGE_NOT_FOUND):
			// An empty long poll ("no new message"): not an error.
			b.reset()
			return 0
		case rs.Code == int32(v2.Code_INTERNAL_SERVER_ERROR) && strings.Contains(rs.Message, "settings") &&
			time.Now().Before(settingsGrace):
			// The proxy has not processed the client's settings yet
			// (telemetry is asynchronous); a missing group gives the same
			// error forever, so it is quiet only during the grace period.
			log.Debug("consumer settings not ready; retrying receive", slog.String("error", rs.Message))
			return 200 * time.Millisecond
		}
	}
	wait := b.next()
	log.Warn("receive failed", slog.String("error", err.Error()), slog.String("error_class", receiveErrorClass(err)),
		slog.Duration("retry_in", wait))
	return wait
}

func receiveErrorClass(err error) string {
	var rs *rmq.ErrRpcStatus
	if errors.As(err, &rs) {
		return v2.Code(rs.Code).String()
	}
	return "CLIENT_ERROR"
}

// backoff is a capped exponential backoff (no jitter: one loop per runner).
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(lo, hi time.Duration) *backoff { return &backoff{min: lo, max: hi} }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }
