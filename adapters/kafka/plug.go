package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// PlugName is the value of SECKILL_BROKER that chooses this adapter.
const PlugName = "kafka"

// Defaults of the settings.
const (
	DefaultBrokers     = "127.0.0.1:59092"
	DefaultPartitions  = 8
	DefaultReplication = 1
	DefaultRetryDelay  = time.Second
	// defaultSendTimeout bounds a send when Neutral.SendTimeout is zero.
	defaultSendTimeout = 5 * time.Second
)

// validPrefix is what a prefix may hold: Kafka topic names allow only
// letters, digits, '.', '_' and '-'.
var validPrefix = regexp.MustCompile(`^[a-zA-Z0-9._-]*$`)

// Plug is the Kafka adapter's plug (brokerplug.Plug). Its zero value is
// ready; it holds no state.
type Plug struct{}

// Name returns PlugName.
func (Plug) Name() string { return PlugName }

// Settings are the Kafka adapter's own settings.
type Settings struct {
	// Brokers are the seed brokers, host:port (SECKILL_KAFKA_BROKERS,
	// comma-separated).
	Brokers []string
	// Prefix starts every topic and group name (SECKILL_KAFKA_PREFIX).
	Prefix string
	// Partitions is the partition count of created topics
	// (SECKILL_KAFKA_PARTITIONS).
	Partitions int
	// Replication is the replication factor of created topics
	// (SECKILL_KAFKA_REPLICATION).
	Replication int
	// Redeliveries, when positive, replaces every group's MaxRetries
	// (SECKILL_KAFKA_REDELIVERIES); zero keeps them.
	Redeliveries int
	// RetryDelay is the redelivery delay of a decision without
	// RetryAfter (SECKILL_KAFKA_RETRY_DELAY).
	RetryDelay time.Duration
}

// ReadSettings declares and reads the adapter's settings through r.
func (Plug) ReadSettings(r brokerplug.SettingReader) brokerplug.Settings {
	return Settings{
		Brokers: splitBrokers(r.String("SECKILL_KAFKA_BROKERS", DefaultBrokers,
			"comma-separated Kafka seed brokers host:port (with SECKILL_BROKER=kafka)")),
		Prefix: r.String("SECKILL_KAFKA_PREFIX", "", "prefix of every Kafka topic and consumer group name"),
		Partitions: r.Int("SECKILL_KAFKA_PARTITIONS", DefaultPartitions,
			"partitions of each Kafka topic the service creates, 1..1024"),
		Replication: r.Int("SECKILL_KAFKA_REPLICATION", DefaultReplication,
			"replication factor of each Kafka topic the service creates, 1..16"),
		Redeliveries: r.Int("SECKILL_KAFKA_REDELIVERIES", 0,
			"redeliveries before a message is dead-lettered; 0 keeps each group's own bound"),
		RetryDelay: r.Duration("SECKILL_KAFKA_RETRY_DELAY", DefaultRetryDelay,
			"delay of a Kafka redelivery the handler asked for without a RetryAfter"),
	}
}

// splitBrokers splits a comma-separated broker list, dropping blanks.
func splitBrokers(s string) []string {
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Validate returns every problem of the settings, each naming its
// variable.
func (s Settings) Validate() []error {
	var errs []error
	if len(s.Brokers) == 0 {
		errs = append(errs, errors.New("SECKILL_KAFKA_BROKERS is empty"))
	}
	for _, b := range s.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			errs = append(errs, fmt.Errorf("SECKILL_KAFKA_BROKERS: %q is not host:port", b))
		}
	}
	if !validPrefix.MatchString(s.Prefix) {
		errs = append(errs, fmt.Errorf("SECKILL_KAFKA_PREFIX %q may only contain letters, digits, '.', '_' and '-'", s.Prefix))
	}
	if s.Partitions < 1 || s.Partitions > 1024 {
		errs = append(errs, errors.New("SECKILL_KAFKA_PARTITIONS must be 1..1024"))
	}
	if s.Replication < 1 || s.Replication > 16 {
		errs = append(errs, errors.New("SECKILL_KAFKA_REPLICATION must be 1..16"))
	}
	if s.Redeliveries < 0 || s.Redeliveries > 1000 {
		errs = append(errs, errors.New("SECKILL_KAFKA_REDELIVERIES must be 0..1000"))
	}
	if s.RetryDelay <= 0 || s.RetryDelay > time.Hour {
		errs = append(errs, errors.New("SECKILL_KAFKA_RETRY_DELAY must be above 0 and at most 1h"))
	}
	return errs
}

// Target returns the seed brokers.
func (s Settings) Target() string { return strings.Join(s.Brokers, ",") }

// LogValue shows the settings (they hold no secret).
func (s Settings) LogValue() slog.Value {
	return slog.GroupValue(slog.String("brokers", s.Target()), slog.String("prefix", s.Prefix),
		slog.Int("partitions", s.Partitions), slog.Int("replication", s.Replication),
		slog.Int("redeliveries", s.Redeliveries), slog.Duration("retry_delay", s.RetryDelay))
}

// validated returns s as an error when it has problems.
func (s Settings) validated() error {
	if errs := s.Validate(); len(errs) > 0 {
		return fmt.Errorf("kafka settings: %w", errors.Join(errs...))
	}
	return nil
}

// Features: Kafka has no native delayed delivery.
func (Plug) Features() brokerplug.Features {
	return brokerplug.Features{DelayedDelivery: false, DeliveryCount: true}
}

// Open builds the Kafka broker from validated settings. It does not
// connect: Start creates the topics and the publisher connects lazily.
func (Plug) Open(ps brokerplug.Settings, d brokerplug.Deps) (brokerplug.Broker, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("kafka plug: settings of type %T", ps)
	}
	if err := s.validated(); err != nil {
		return nil, err
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("adapter", PlugName)
	p, err := newPublisher(s, d, log)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher: %w", err)
	}
	return &broker{publisher: p, s: s, d: d, log: log}, nil
}

// broker is the adapter's brokerplug.Broker.
type broker struct {
	*publisher
	s   Settings
	d   brokerplug.Deps
	log *slog.Logger
}

// Start creates every missing topic (idempotent). A broker that cannot be
// reached is logged, not an error: the publisher and the consumers retry.
func (b *broker) Start(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := createTopics(cctx, b.s, serviceTopics(b.s.Prefix, ports.Subscriptions())); err != nil {
		b.log.Warn("kafka topics not created at start; consumers create theirs and retry", slog.String("error", err.Error()))
	}
	return nil
}

// Close closes the publisher's client.
func (b *broker) Close() error {
	b.publisher.close()
	return nil
}

func (b *broker) Features() brokerplug.Features { return Plug{}.Features() }

// Group returns <prefix><g>, the group id of g's consumer.
func (b *broker) Group(g ports.ConsumerGroup) string { return b.s.Prefix + string(g) }

// Consumer returns the run loop of business group sub (see runner).
func (b *broker) Consumer(sub ports.Subscription, h ports.BatchHandler, opts brokerplug.ConsumerOptions) (func(context.Context) error, error) {
	if b.s.Redeliveries > 0 {
		sub.MaxRetries = b.s.Redeliveries
	}
	r, err := newGroupRunner(b.s, sub, h, opts, b.deps(), b.log)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", sub.Group, err)
	}
	return r.Run, nil
}

// deps returns the runner's dependencies.
func (b *broker) deps() runnerDeps {
	return runnerDeps{tracer: b.d.Tracer, reg: b.d.Registerer}
}
