// Package brokerplug is the contract between the composition root and a
// broker adapter. A broker adapter implements Plug (its name, its own
// settings, and how to open it) and Broker (what the composition builds
// the publisher and the consumer loops from); adapters/brokers lists the
// plugs, and everything that chooses a broker (the service's
// configuration, its composition, the end-to-end tests, the dependency
// rule) loops over that list and names no broker.
//
// The use cases never see this package: they see ports.Publisher,
// ports.BatchHandler and ports.BrokerHealth. It imports no broker driver.
package brokerplug

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/ports"
)

// Plug is one broker adapter as the composition sees it. Its methods are
// safe to call on its zero value; a plug holds no state.
type Plug interface {
	// Name is the value of SECKILL_BROKER that chooses the broker: lower
	// case, unique among the plugs.
	Name() string
	// ReadSettings declares and reads the broker's own settings through r.
	// It is called for every plug whichever broker is chosen, so that the
	// service lists every variable; only the chosen broker's settings are
	// validated and opened. A value that does not parse is reported by r.
	ReadSettings(r SettingReader) Settings
	// Features says what the broker does natively (the Broker it opens
	// says the same).
	Features() Features
	// Open builds the broker from settings s (what ReadSettings returned,
	// validated) and the composition's dependencies. It does not connect:
	// Broker.Start does. The caller closes the broker.
	Open(s Settings, d Deps) (Broker, error)
	// NewNamespace creates an isolated namespace on the broker s points
	// at: every topic, queue and consumer group a whole service uses
	// (dead-letter resources included), under o.Prefix, so that a test or
	// a benchmark runs beside others on one broker. The caller closes it.
	NewNamespace(ctx context.Context, s Settings, o NamespaceOptions) (Namespace, error)
	// DevStack describes the broker's processes in the local development
	// stack (see DevProcess), which the stack runs when the broker is
	// selected. Nil when the stack runs the broker with components of its
	// own (RocketMQ and RabbitMQ, whose start-up needs more than a JVM
	// and its files).
	DevStack() []DevProcess
	// DevCluster describes the processes of the broker's cluster mode in
	// the local development stack: the nodes of one cluster that keeps
	// serving when one of them stops, run on request in a state dir of
	// their own (`seckill-stack up --broker-cluster NAME`). Nil when the
	// broker has no cluster mode of its plug's (RocketMQ's is the stack's
	// own, RabbitMQ has none).
	DevCluster() []DevProcess
	// TopologyCommand returns the broker's part of one `seckill topology`
	// subcommand: its own flags and the administration of its resources
	// (see TopologyCommand); a new one per call.
	TopologyCommand() TopologyCommand
}

// NamespaceOptions shapes a namespace.
type NamespaceOptions struct {
	// Prefix starts every name of the namespace: letters, digits and '_',
	// unique among the namespaces of the broker.
	Prefix string
	// Redeliveries, when positive, is how often a business group receives
	// a message again after its first delivery before the message is
	// dead-lettered; zero keeps the production value. Tests lower it to
	// see dead letters quickly.
	Redeliveries int
}

// Namespace is an isolated namespace of a broker (Plug.NewNamespace).
type Namespace interface {
	// Prefix is the namespace's name prefix.
	Prefix() string
	// Settings are the broker's settings pointed at the namespace, for
	// Plug.Open or for a service's configuration.
	Settings() Settings
	// Env is what a service process needs in its environment to use the
	// namespace, as KEY=value: SECKILL_BROKER and the broker's address and
	// prefix variables (the other settings keep the process's values).
	Env() []string
	// Close deletes the namespace, its messages included. It returns the
	// deletions that failed, joined.
	Close(ctx context.Context) error
}

// SettingReader reads one setting of the service's configuration: key is
// its environment variable, def its default (used when the variable is
// unset or empty) and meaning one line saying what it controls. The
// service lists every setting read this way with its value in effect.
type SettingReader interface {
	String(key, def, meaning string) string
	// Secret reads a value that is masked wherever settings are shown.
	Secret(key, def, meaning string) string
	Int(key string, def int, meaning string) int
	Bool(key string, def bool, meaning string) bool
	Duration(key string, def time.Duration, meaning string) time.Duration
}

// Settings is what a plug read: the broker's own settings.
type Settings interface {
	// Validate returns every problem of the settings, each naming its
	// variable; nil when they are usable.
	Validate() []error
	// Target says in a few words where the broker is (an address, never a
	// credential), for start-up logs and benchmark headers.
	Target() string
	// LogValue shows the settings in logs with their secrets masked.
	LogValue() slog.Value
}

// Neutral holds the settings every broker shares, read by the service's
// configuration whichever broker is chosen.
type Neutral struct {
	// SendTimeout bounds one synchronous send (SECKILL_SEND_TIMEOUT).
	SendTimeout time.Duration
	// AckBatch acknowledges the messages of a consumer batch together, in
	// whatever way the broker does it best (SECKILL_ACK_BATCH); false
	// acknowledges each message on its own.
	AckBatch bool
}

// Deps is what the composition hands to Plug.Open.
type Deps struct {
	Neutral Neutral
	// Tracer starts the send spans and continues the consumer spans.
	Tracer trace.TracerProvider
	// Registerer is the service's one Prometheus registry.
	Registerer prometheus.Registerer
	// Log is the service's logger; the plug adds its own attributes.
	Log *slog.Logger
}

// Broker is the messaging adapter as the composition uses it. It
// publishes through ports.Publisher, reports its health through
// ports.BrokerHealth, and builds the consumer loops of the business
// groups and of the dead letters.
type Broker interface {
	ports.Publisher
	ports.BrokerHealth
	// Start connects the publisher (and declares what the broker needs
	// declared before use, when it does that itself); the service calls
	// it before serving. A broker that is not reachable yet is not an
	// error of Start: the publisher and the consumers reconnect.
	Start(ctx context.Context) error
	// Close releases the broker's connections; the composition's cleanup
	// calls it once, after every worker stopped.
	Close() error
	// Features says what the broker does natively; the core supplies what
	// it lacks (see Features).
	Features() Features
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
	// delivery count, false for a delivery that is not a dead letter).
	DeadLetterReader(reader func(origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)) ports.BatchHandler) (func(context.Context) error, error)
}

// Features lists what a broker may lack. The broker contract suite
// (contracttest.Broker) checks each feature a broker declares, and that a
// broker without one refuses what would need it; the core supplies the
// feature instead, so a broker without it still runs the whole service.
type Features struct {
	// DelayedDelivery: a message with DeliverAt is not delivered before
	// then. Without it the outbox relay holds a delayed message in
	// PostgreSQL until it is due (RelayConfig.HoldDelayed), and the
	// broker refuses a message with DeliverAt (ports.ErrSendRejected).
	DelayedDelivery bool
	// DeliveryCount: Delivery.DeliveryAttempt counts the deliveries of a
	// message to its consumer group, from 1. Without it the broker reports
	// 0, and the composition wraps each group's handler in
	// brokerkit.CountDeliveries, which counts the deliveries this process
	// saw (a lower bound: it restarts with the process). The count only
	// grows the retry backoff and bounds a compensation's attempts, which
	// also end at a time, so a lower bound is enough.
	DeliveryCount bool
}

// Message groups are not a feature a broker may lack: the ordered topic
// (ports.TopicOrderStateFIFO) promises projection consumers every order's
// events in order, and only the broker can keep that promise across
// redeliveries without a sequencing layer of its own. A broker without
// ordered message groups cannot be plugged; the contract suite's
// MessageGroupOrder case is required of every broker
// (docs/architecture.md, "Adding a broker").

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
	// (SECKILL_CONSUMER_LIMITER=adaptive).
	Limit ports.ConcurrencyLimit
}
