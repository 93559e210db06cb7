package rabbitmq

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	// DefaultSendTimeout bounds one Publish (write + publisher confirm),
	// the RocketMQ adapter's value: a quorum queue confirms after its Raft
	// log is written, P99 3 ms for one sender and 6 ms for 16 on the
	// development box (README.md); an UNKNOWN only costs a resend.
	DefaultSendTimeout = 50 * time.Millisecond
	// DefaultFIFOShards is the number of quorum queues per ordered group
	// (the FIFO projection): messages are spread by a hash of their
	// message group, each queue is consumed by one active consumer.
	DefaultFIFOShards = 8
	// DefaultPublishChannels is the number of confirm-mode channels a
	// Publisher spreads its sends over.
	DefaultPublishChannels = 4
	// DefaultReconnectInterval is the pause between the client's
	// connection recovery attempts.
	DefaultReconnectInterval = time.Second
)

// Config is the adapter's connection and naming configuration.
type Config struct {
	// URL is the AMQP URL (amqp://user:pass@host:port/vhost). Required.
	URL string
	// Prefix starts every exchange and queue name (the environment
	// prefix, like the RocketMQ adapter's TopicPrefix); letters, digits,
	// '_', '-' and '.'.
	Prefix string
	// SendTimeout bounds one Publish together with the caller's context.
	// Zero means DefaultSendTimeout.
	SendTimeout time.Duration
	// FIFOShards is the number of shard queues of an ordered group. Every
	// process of an environment must use the same value: it decides which
	// queue a message group goes to. Zero means DefaultFIFOShards.
	FIFOShards int
	// PublishChannels is the number of confirm-mode channels of a
	// Publisher. Zero means DefaultPublishChannels.
	PublishChannels int
	// MaxQueueLength, when positive, bounds every group queue
	// (x-max-length with x-overflow reject-publish): a publish to a full
	// queue is nacked by the broker and fails as DEFINITE_FAILURE. Zero
	// means unbounded.
	MaxQueueLength int
	// ReconnectInterval is the pause between connection recovery attempts
	// (the client retries until Close). Zero means
	// DefaultReconnectInterval.
	ReconnectInterval time.Duration
	// Tracer, when set, records a producer span per send ("send <topic>")
	// and a consumer span per handled batch ("process <topic>"), linked by
	// the traceparent property, as the RocketMQ adapter does.
	Tracer trace.TracerProvider
}

// validPrefix is what Config.Prefix may contain.
var validPrefix = regexp.MustCompile(`^[a-zA-Z0-9_.-]*$`)

func (c Config) withDefaults() Config {
	if c.SendTimeout <= 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.FIFOShards <= 0 {
		c.FIFOShards = DefaultFIFOShards
	}
	if c.PublishChannels <= 0 {
		c.PublishChannels = DefaultPublishChannels
	}
	if c.ReconnectInterval <= 0 {
		c.ReconnectInterval = DefaultReconnectInterval
	}
	return c
}

func (c Config) validate() error {
	if c.URL == "" {
		return errors.New("rabbitmq config: empty URL")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return fmt.Errorf("rabbitmq config: URL is not an amqp:// or amqps:// URL")
	}
	if !validPrefix.MatchString(c.Prefix) {
		return fmt.Errorf("rabbitmq config: the prefix %q may only contain letters, digits, '_', '-' and '.'", c.Prefix)
	}
	if c.FIFOShards > 256 {
		return fmt.Errorf("rabbitmq config: %d FIFO shards, at most 256", c.FIFOShards)
	}
	return nil
}
