package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// Broker is the messaging adapter as the composition uses it: the one seam
// a broker adapter plugs into (SECKILL_BROKER chooses which). It publishes
// through ports.Publisher, reports its health through ports.BrokerHealth,
// and builds the consumer loops of the business groups and of the dead
// letters; the use cases see only the ports.
type Broker interface {
	ports.Publisher
	ports.BrokerHealth
	// Start connects the publisher; App.Run calls it before serving.
	Start(ctx context.Context) error
	// Close releases the broker's connections; the composition's cleanup
	// calls it once, after every worker stopped.
	Close() error
	// Group returns the physical name of business group g, the name the
	// inbox and the dead-letter table record.
	Group(g ports.ConsumerGroup) string
	// Consumer returns the run loop of business group sub: it hands the
	// group's deliveries to h, at most opts.Batch per call and at most
	// opts.Concurrency calls at a time, applies h's decisions, and returns
	// when ctx ends (after a bounded drain of in-flight calls).
	Consumer(sub ports.Subscription, h ports.BatchHandler, opts ConsumerOptions) (func(context.Context) error, error)
	// DeadLetterReader returns the run loop that hands the dead-lettered
	// messages of every business group to the handler reader builds, with
	// a function telling each delivery's origin (source group and its
	// delivery count).
	DeadLetterReader(reader func(origin func(ports.Delivery) (application.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error)
}

// ConsumerOptions bounds one business group's consumer loop.
type ConsumerOptions struct {
	// Batch is the largest number of deliveries per handler call.
	Batch int
	// Concurrency is the largest number of concurrent handler calls,
	// derived from the PostgreSQL pool budget.
	Concurrency int
	// LogAcks logs every acknowledged message at INFO (an opt-in: one
	// line per message; without it acknowledgements are logged at DEBUG).
	LogAcks bool
	// Limit, when set, is the group's adaptive bound below Concurrency
	// (SECKILL_CONSUMER_LIMITER=adaptive), applied by either broker's
	// runner (RunnerConfig.Limit).
	Limit ports.ConcurrencyLimit
}

// provideBroker builds the broker adapter cfg.Broker names and returns its
// cleanup.
func provideBroker(cfg config.Config, tr Tracer, reg prometheus.Registerer, log *slog.Logger) (Broker, func(), error) {
	switch cfg.Broker {
	case config.BrokerRocketMQ:
		b, err := newRocketMQBroker(cfg, tr, reg, log)
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Close() }, nil
	case config.BrokerRabbitMQ:
		b, err := newRabbitMQBroker(cfg, tr, reg, log)
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Close() }, nil
	}
	return nil, nil, fmt.Errorf("SECKILL_BROKER %q: no such broker adapter", cfg.Broker)
}

// rocketMQBroker is the Broker of adapters/rocketmq.
type rocketMQBroker struct {
	*rocketmq.Publisher
	bc  rocketmq.Config
	cfg config.Config
	reg prometheus.Registerer
	log *slog.Logger
}

func newRocketMQBroker(cfg config.Config, tr Tracer, reg prometheus.Registerer, log *slog.Logger) (*rocketMQBroker, error) {
	bc := rocketmq.Config{Endpoint: cfg.RocketMQ.Endpoint, TopicPrefix: cfg.RocketMQ.TopicPrefix, Tracer: tr.TracerProvider,
		SendTimeout: cfg.RocketMQ.SendTimeout, SendBatch: cfg.RocketMQ.SendBatch, AckOneByOne: !cfg.RocketMQ.AckBatch,
		AccessKey: cfg.RocketMQ.AccessKey, AccessSecret: string(cfg.RocketMQ.SecretKey), ClientLogDir: cfg.RocketMQ.ClientLogDir,
		Plaintext: !cfg.RocketMQ.TLS}
	p, err := rocketmq.NewPublisher(bc, log.With("adapter", "rocketmq"), reg)
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	b := &rocketMQBroker{Publisher: p, bc: bc, cfg: cfg, reg: reg, log: log}
	if urls := cfg.RocketMQ.MetricsURL; urls != "" { // one exporter per broker, comma-separated
		groups := []string{bc.Group(rocketmq.GroupDLQReader)}
		for _, g := range rocketmq.Groups() {
			groups = append(groups, bc.Group(g))
		}
		if err := reg.Register(rocketmq.NewLagCollector(urls, groups, cfg.RocketMQ.MetricsEvery, log.With("component", "broker-lag"))); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("broker lag metrics: %w", err)
		}
	}
	return b, nil
}

func (b *rocketMQBroker) Group(g ports.ConsumerGroup) string { return b.bc.Group(rocketmq.Group(g)) }

func (b *rocketMQBroker) runner(rc rocketmq.RunnerConfig, h ports.BatchHandler) (func(context.Context) error, error) {
	rn, err := rocketmq.NewRunner(b.bc, rc, h, b.log, b.reg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", rc.Group, err)
	}
	return rn.Run, nil
}

func (b *rocketMQBroker) Consumer(sub ports.Subscription, h ports.BatchHandler, opts ConsumerOptions) (func(context.Context) error, error) {
	physical, err := b.bc.Topic(sub.Topic)
	if err != nil {
		return nil, err
	}
	return b.runner(rocketmq.RunnerConfig{Group: b.Group(sub.Group), Subscriptions: map[string]string{physical: "*"},
		Orderly: sub.Ordered, BatchSize: opts.Batch, Concurrency: opts.Concurrency,
		InvisibleDuration: b.cfg.Workers.InvisibleDuration, LogAcks: opts.LogAcks, Limit: opts.Limit}, h)
}

func (b *rocketMQBroker) DeadLetterReader(reader func(origin func(ports.Delivery) (application.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error) {
	subs := map[string]string{}
	for _, g := range rocketmq.Groups() {
		subs[rocketmq.DLQTopic(b.bc.Group(g))] = "*"
	}
	// One group reads the five dead-letter topics; a receive long-polls one
	// topic at a time, so a short wait keeps every topic's latency low.
	return b.runner(rocketmq.RunnerConfig{Group: b.bc.Group(rocketmq.GroupDLQReader), Subscriptions: subs,
		BatchSize: 16, Concurrency: 1, InvisibleDuration: b.cfg.Workers.InvisibleDuration, AwaitDuration: time.Second},
		reader(func(dv ports.Delivery) (application.DeadLetterOrigin, bool) {
			o, ok := rocketmq.ParseDeadLetter(b.bc, dv)
			return application.DeadLetterOrigin{Group: o.SourceGroup, Deliveries: o.SourceDeliveries}, ok
		}))
}

// rabbitMQBroker is the Broker of adapters/rabbitmq.
type rabbitMQBroker struct {
	*rabbitmq.Publisher
	rc  rabbitmq.Config
	cfg config.Config
	reg prometheus.Registerer
	log *slog.Logger
}

func newRabbitMQBroker(cfg config.Config, tr Tracer, reg prometheus.Registerer, log *slog.Logger) (*rabbitMQBroker, error) {
	rc := rabbitmq.Config{URL: string(cfg.RabbitMQ.URL), Prefix: cfg.RabbitMQ.Prefix, FIFOShards: cfg.RabbitMQ.FIFOShards,
		SendTimeout: cfg.RocketMQ.SendTimeout, Tracer: tr.TracerProvider}
	p, err := rabbitmq.NewPublisher(rc, log.With("adapter", "rabbitmq"), reg)
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	return &rabbitMQBroker{Publisher: p, rc: rc, cfg: cfg, reg: reg, log: log}, nil
}

// Start declares the topology (idempotent; a broker not reachable yet is
// logged and left to the consumers' and the publisher's reconnection) and
// connects the publisher.
func (b *rabbitMQBroker) Start(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := rabbitmq.Declare(dctx, b.rc, b.Topology())
	cancel()
	if err != nil {
		b.log.Warn("rabbitmq topology not declared at start; consumers retry until it exists", "error", err)
	}
	return b.Publisher.Start(ctx)
}

func (b *rabbitMQBroker) Group(g ports.ConsumerGroup) string {
	if spec, ok := b.Topology().Group(g); ok {
		return spec.Name
	}
	return b.rc.Prefix + string(g)
}

func (b *rabbitMQBroker) Consumer(sub ports.Subscription, h ports.BatchHandler, opts ConsumerOptions) (func(context.Context) error, error) {
	rn, err := rabbitmq.NewRunner(b.rc, b.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, BatchSize: opts.Batch,
		Concurrency: opts.Concurrency, LogAcks: opts.LogAcks, Limit: opts.Limit, AckOneByOne: !b.cfg.RocketMQ.AckBatch}, h, b.log, b.reg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", sub.Group, err)
	}
	return rn.Run, nil
}

func (b *rabbitMQBroker) DeadLetterReader(reader func(origin func(ports.Delivery) (application.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error) {
	rn, err := rabbitmq.NewDeadLetterRunner(b.rc, b.Topology(), func(origin func(ports.Delivery) (rabbitmq.DeadLetter, bool)) ports.BatchHandler {
		return reader(func(d ports.Delivery) (application.DeadLetterOrigin, bool) {
			o, ok := origin(d)
			return application.DeadLetterOrigin{Group: o.SourceGroup, Deliveries: o.SourceDeliveries}, ok
		})
	}, b.log, b.reg)
	if err != nil {
		return nil, fmt.Errorf("dead-letter reader: %w", err)
	}
	return rn.Run, nil
}
