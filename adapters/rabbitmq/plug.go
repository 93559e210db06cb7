package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// PlugName is the value of SECKILL_BROKER that chooses this adapter.
const PlugName = "rabbitmq"

// Plug is the RabbitMQ adapter's plug (brokerplug.Plug); ReadSettings declares
// its variables.
type Plug struct{}

// Name returns PlugName.
func (Plug) Name() string { return PlugName }

// Settings are the RabbitMQ adapter's own settings, as the service reads
// them from its environment.
type Settings struct {
	// URL is the AMQP URL with credentials and virtual host
	// (SECKILL_RABBITMQ_URL); masked in logs.
	URL string
	// Prefix starts every exchange and queue name (SECKILL_RABBITMQ_PREFIX).
	Prefix string
	// FIFOShards is the number of single-active-consumer queues the
	// ordered projection is spread over (SECKILL_RABBITMQ_FIFO_SHARDS);
	// every instance must use the same value.
	FIFOShards int
}

// ReadSettings declares and reads the adapter's settings.
func (Plug) ReadSettings(r brokerplug.SettingReader) brokerplug.Settings {
	return Settings{
		URL: r.Secret("SECKILL_RABBITMQ_URL", "amqp://seckill:seckill@127.0.0.1:56720/",
			"AMQP URL of RabbitMQ (with SECKILL_BROKER=rabbitmq)"),
		Prefix: r.String("SECKILL_RABBITMQ_PREFIX", "",
			"prefix of every RabbitMQ exchange and queue name"),
		FIFOShards: r.Int("SECKILL_RABBITMQ_FIFO_SHARDS", 8,
			"queues the ordered projection is spread over (the same on every instance), 1..256"),
	}
}

// Validate returns every problem of the settings.
func (s Settings) Validate() []error {
	var errs []error
	if s.URL == "" {
		errs = append(errs, errors.New("SECKILL_RABBITMQ_URL is empty"))
	}
	if s.FIFOShards < 1 || s.FIFOShards > 256 {
		errs = append(errs, errors.New("SECKILL_RABBITMQ_FIFO_SHARDS must be 1..256"))
	}
	return errs
}

// Target returns the host of the AMQP URL, without its credentials.
func (s Settings) Target() string {
	if u, err := url.Parse(s.URL); err == nil && u.Host != "" {
		return u.Host
	}
	return "(AMQP URL not parsed)"
}

// LogValue shows the settings without the URL's credentials.
func (s Settings) LogValue() slog.Value {
	return slog.GroupValue(slog.String("host", s.Target()), slog.String("prefix", s.Prefix), slog.Int("fifo_shards", s.FIFOShards))
}

// ClientConfig returns the adapter's client configuration for settings s
// and the neutral settings n.
func (s Settings) ClientConfig(n brokerplug.Neutral) Config {
	return Config{URL: s.URL, Prefix: s.Prefix, FIFOShards: s.FIFOShards, SendTimeout: n.SendTimeout}
}

// Open builds the RabbitMQ broker; Start declares the topology.
func (Plug) Open(ps brokerplug.Settings, d brokerplug.Deps) (brokerplug.Broker, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("rabbitmq plug: settings of type %T", ps)
	}
	rc := s.ClientConfig(d.Neutral)
	rc.Tracer = d.Tracer
	p, err := NewPublisher(rc, d.Log.With("adapter", PlugName), d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	return &broker{Publisher: p, rc: rc, ackOneByOne: !d.Neutral.AckBatch, reg: d.Registerer, log: d.Log}, nil
}

// broker is the adapter's brokerplug.Broker.
type broker struct {
	*Publisher
	rc          Config
	ackOneByOne bool
	reg         prometheus.Registerer
	log         *slog.Logger
}

// Start declares the topology (idempotent; a broker not reachable yet is
// logged and left to the consumers' and the publisher's reconnection) and
// connects the publisher.
func (b *broker) Start(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := Declare(dctx, b.rc, b.Topology())
	cancel()
	if err != nil {
		b.log.Warn("rabbitmq topology not declared at start; consumers retry until it exists", "error", err)
	}
	return b.Publisher.Start(ctx)
}

// Features: the broker delays messages natively.
func (Plug) Features() brokerplug.Features {
	return brokerplug.Features{DelayedDelivery: true, DeliveryCount: true}
}

func (b *broker) Features() brokerplug.Features { return Plug{}.Features() }

func (b *broker) Group(g ports.ConsumerGroup) string {
	if spec, ok := b.Topology().Group(g); ok {
		return spec.Name
	}
	return b.rc.Prefix + string(g)
}

func (b *broker) Consumer(sub ports.Subscription, h ports.BatchHandler, opts brokerplug.ConsumerOptions) (func(context.Context) error, error) {
	rn, err := NewRunner(b.rc, b.Topology(), RunnerConfig{Group: sub.Group, BatchSize: opts.Batch,
		Concurrency: opts.Concurrency, LogAcks: opts.LogAcks, Limit: opts.Limit, AckOneByOne: b.ackOneByOne}, h, b.log, b.reg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", sub.Group, err)
	}
	return rn.Run, nil
}

func (b *broker) DeadLetterReader(reader func(origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error) {
	rn, err := NewDeadLetterRunner(b.rc, b.Topology(), func(origin func(ports.Delivery) (DeadLetter, bool)) ports.BatchHandler {
		return reader(func(d ports.Delivery) (ports.DeadLetterOrigin, bool) {
			o, ok := origin(d)
			return ports.DeadLetterOrigin{Group: o.SourceGroup, Deliveries: o.SourceDeliveries}, ok
		})
	}, b.log, b.reg)
	if err != nil {
		return nil, fmt.Errorf("dead-letter reader: %w", err)
	}
	return rn.Run, nil
}

// DevStack returns nil: the local stack runs RabbitMQ with components of its
// own (deploy/devstack).
func (Plug) DevStack() []brokerplug.DevProcess { return nil }

// DevCluster: RabbitMQ has no cluster mode in the dev stack.
func (Plug) DevCluster() []brokerplug.DevProcess { return nil }
