package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// PlugName is the value of SECKILL_BROKER that chooses this adapter.
const PlugName = "rocketmq"

// Plug is the RocketMQ adapter's plug (brokerplug.Plug); ReadSettings declares
// its variables.
type Plug struct{}

// Name returns PlugName.
func (Plug) Name() string { return PlugName }

// Settings are the RocketMQ adapter's own settings, as the service reads
// them from its environment.
type Settings struct {
	Endpoint    string // SECKILL_ROCKETMQ_ENDPOINT (proxy gRPC)
	TopicPrefix string // SECKILL_TOPIC_PREFIX
	AccessKey   string // SECKILL_ROCKETMQ_ACCESS_KEY
	SecretKey   string // SECKILL_ROCKETMQ_SECRET_KEY
	// SendBatch is how many concurrent plain messages of one topic one
	// SendMessage call may carry (SECKILL_SEND_BATCH; 0 or 1: one per
	// call, through the client library).
	SendBatch int
	// ClientLogDir receives the Go client's own log files
	// (SECKILL_ROCKETMQ_LOG_DIR).
	ClientLogDir string
	// MetricsURL lists the brokers' Prometheus exporters
	// (SECKILL_ROCKETMQ_METRICS_URL), comma-separated, one per broker of
	// the cluster, read for the consumer groups' ready and lag figures
	// (LagCollector); empty exports none.
	MetricsURL string
	// MetricsEvery is how often the exporters are read at most
	// (SECKILL_ROCKETMQ_METRICS_EVERY).
	MetricsEvery time.Duration
	// TLS dials the proxy with TLS (SECKILL_ROCKETMQ_TLS, default true:
	// the client library's TLS without certificate verification); false
	// dials in plain text, for a proxy on loopback or a trusted network.
	TLS bool
	// Broker is the remoting address of the one broker the topology
	// command works on (SECKILL_ROCKETMQ_BROKER); empty: every master
	// Namesrv lists.
	Broker string
	// Namesrv is the name server (SECKILL_ROCKETMQ_NAMESRV) the admin
	// tasks ask for the master brokers: namespaces (NewNamespace) and the
	// topology command. The service's clients reach the brokers through
	// the proxy and do not use it.
	Namesrv string
	// InvisibleDuration is how long a received message stays hidden from
	// the group's other consumers before it is delivered again
	// (SECKILL_INVISIBLE_DURATION).
	InvisibleDuration time.Duration
}

// ReadSettings declares and reads the adapter's settings.
func (Plug) ReadSettings(r brokerplug.SettingReader) brokerplug.Settings {
	return Settings{
		Endpoint: r.String("SECKILL_ROCKETMQ_ENDPOINT", "127.0.0.1:8081",
			"RocketMQ proxy gRPC endpoint (host:port)"),
		TopicPrefix: r.String("SECKILL_TOPIC_PREFIX", "",
			"prefix of every RocketMQ topic and consumer group name"),
		AccessKey: r.String("SECKILL_ROCKETMQ_ACCESS_KEY", "seckill",
			"RocketMQ access key"),
		SecretKey: r.Secret("SECKILL_ROCKETMQ_SECRET_KEY", "seckill",
			"RocketMQ secret key"),
		SendBatch: r.Int("SECKILL_SEND_BATCH", 32,
			"concurrent plain messages of one topic one RocketMQ SendMessage call may carry (0 or 1: one per call)"),
		ClientLogDir: r.String("SECKILL_ROCKETMQ_LOG_DIR", "",
			"directory of the RocketMQ client's own log files (empty: the client's default)"),
		MetricsURL: r.String("SECKILL_ROCKETMQ_METRICS_URL", "",
			"the brokers' Prometheus exporters (http://host:port/metrics), comma-separated, one per broker of the cluster, read for mq_consumer_ready and mq_consumer_lag_* per group; empty: not exported"),
		TLS: r.Bool("SECKILL_ROCKETMQ_TLS", true,
			"dial the RocketMQ proxy with TLS (without certificate verification, as the client library does); false: plain text, for loopback or a trusted network"),
		MetricsEvery: r.Duration("SECKILL_ROCKETMQ_METRICS_EVERY", 15*time.Second,
			"read the brokers' exporters at most this often (1s..5m); scrapes in between get the last read's figures"),
		Broker: r.String("SECKILL_ROCKETMQ_BROKER", "",
			"remoting address of the one broker seckill topology apply|check|add-group work on (the default of --broker); empty: every master the name server lists"),
		Namesrv: r.String("SECKILL_ROCKETMQ_NAMESRV", "127.0.0.1:9876",
			"name server (host:port) the admin tasks ask for the master brokers: seckill topology and the namespaces of tests and benchmarks (the service's clients use the proxy)"),
		InvisibleDuration: r.Duration("SECKILL_INVISIBLE_DURATION", 10*time.Second,
			"how long a received RocketMQ message stays invisible before redelivery (>= the proxy's minimum, 10s by default)"),
	}
}

// Validate returns every problem of the settings.
func (s Settings) Validate() []error {
	var errs []error
	check := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New(msg))
		}
	}
	check(s.Endpoint != "", "SECKILL_ROCKETMQ_ENDPOINT is empty")
	check(s.SendBatch >= 0 && s.SendBatch <= 1024, "SECKILL_SEND_BATCH must be 0..1024")
	check(s.MetricsEvery >= time.Second && s.MetricsEvery <= 5*time.Minute, "SECKILL_ROCKETMQ_METRICS_EVERY must be 1s..5m")
	check(s.InvisibleDuration >= time.Second, "SECKILL_INVISIBLE_DURATION must be >= 1s (and >= the proxy's minInvisibleTimeMillsForRecv, 10s by default)")
	return errs
}

// Target returns the proxy's endpoint.
func (s Settings) Target() string { return s.Endpoint }

// LogValue shows the settings without the secret key.
func (s Settings) LogValue() slog.Value {
	return slog.GroupValue(slog.String("endpoint", s.Endpoint), slog.String("topic_prefix", s.TopicPrefix),
		slog.Int("send_batch", s.SendBatch), slog.Bool("tls", s.TLS), slog.Duration("invisible_duration", s.InvisibleDuration))
}

// ClientConfig returns the adapter's client configuration for settings s
// and the neutral settings n.
func (s Settings) ClientConfig(n brokerplug.Neutral) Config {
	return Config{Endpoint: s.Endpoint, TopicPrefix: s.TopicPrefix, SendTimeout: n.SendTimeout, SendBatch: s.SendBatch,
		AckOneByOne: !n.AckBatch, AccessKey: s.AccessKey, AccessSecret: s.SecretKey, ClientLogDir: s.ClientLogDir,
		Plaintext: !s.TLS}
}

// Open builds the RocketMQ broker: a publisher, and the lag collector when
// MetricsURL names exporters.
func (Plug) Open(ps brokerplug.Settings, d brokerplug.Deps) (brokerplug.Broker, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("rocketmq plug: settings of type %T", ps)
	}
	bc := s.ClientConfig(d.Neutral)
	bc.Tracer = d.Tracer
	p, err := NewPublisher(bc, d.Log.With("adapter", PlugName), d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new publisher: %w", err)
	}
	b := &broker{Publisher: p, bc: bc, s: s, reg: d.Registerer, log: d.Log}
	if s.MetricsURL != "" {
		groups := []string{bc.Group(GroupDLQReader)}
		for _, g := range Groups() {
			groups = append(groups, bc.Group(g))
		}
		if err := d.Registerer.Register(NewLagCollector(s.MetricsURL, groups, s.MetricsEvery, d.Log.With("component", "broker-lag"))); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("broker lag metrics: %w", err)
		}
	}
	return b, nil
}

// broker is the adapter's brokerplug.Broker.
type broker struct {
	*Publisher
	bc  Config
	s   Settings
	reg prometheus.Registerer
	log *slog.Logger
}

// Features: the broker delays messages natively.
func (Plug) Features() brokerplug.Features {
	return brokerplug.Features{DelayedDelivery: true, DeliveryCount: true}
}

func (b *broker) Features() brokerplug.Features { return Plug{}.Features() }

func (b *broker) Group(g ports.ConsumerGroup) string { return b.bc.Group(Group(g)) }

func (b *broker) runner(rc RunnerConfig, h ports.BatchHandler) (func(context.Context) error, error) {
	rn, err := NewRunner(b.bc, rc, h, b.log, b.reg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", rc.Group, err)
	}
	return rn.Run, nil
}

func (b *broker) Consumer(sub ports.Subscription, h ports.BatchHandler, opts brokerplug.ConsumerOptions) (func(context.Context) error, error) {
	physical, err := b.bc.Topic(sub.Topic)
	if err != nil {
		return nil, err
	}
	return b.runner(RunnerConfig{Group: b.Group(sub.Group), Subscriptions: map[string]string{physical: "*"},
		Orderly: sub.Ordered, BatchSize: opts.Batch, Concurrency: opts.Concurrency,
		InvisibleDuration: b.s.InvisibleDuration, LogAcks: opts.LogAcks, Limit: opts.Limit}, h)
}

func (b *broker) DeadLetterReader(reader func(origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error) {
	subs := map[string]string{}
	for _, g := range Groups() {
		subs[DLQTopic(b.bc.Group(g))] = "*"
	}
	// One group reads the five dead-letter topics; a receive long-polls one
	// topic at a time, so a short wait keeps every topic's latency low.
	return b.runner(RunnerConfig{Group: b.bc.Group(GroupDLQReader), Subscriptions: subs,
		BatchSize: 16, Concurrency: 1, InvisibleDuration: b.s.InvisibleDuration, AwaitDuration: time.Second},
		reader(func(dv ports.Delivery) (ports.DeadLetterOrigin, bool) {
			o, ok := ParseDeadLetter(b.bc, dv)
			return ports.DeadLetterOrigin{Group: o.SourceGroup, Deliveries: o.SourceDeliveries}, ok
		}))
}

// DevStack returns nil: the local stack runs RocketMQ with components of its
// own (deploy/devstack).
func (Plug) DevStack() []brokerplug.DevProcess { return nil }

// DevCluster: RocketMQ's cluster mode is the stack's own
// (`seckill-stack up --rocketmq-cluster`).
func (Plug) DevCluster() []brokerplug.DevProcess { return nil }
