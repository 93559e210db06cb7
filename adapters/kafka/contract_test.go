package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/ports"
)

// TestBrokerContract runs the shared publisher and consumer suite (also
// run against RabbitMQ, RocketMQ and the memory broker) against Kafka,
// each case in a namespace of its own (Plug.NewNamespace).
func TestBrokerContract(t *testing.T) {
	t.Parallel()
	contracttest.Broker(t, kafkaHarness{})
}

// kafkaHarness gives the suite a namespace per case, the broker's
// publisher on it and one consumer per group.
type kafkaHarness struct{}

// Options: a retry copy is held until its due time, rounded up to the
// millisecond, so a RetryAfter redelivery is never early; no delayed
// delivery.
func (kafkaHarness) Options() contracttest.BrokerOptions {
	return contracttest.BrokerOptions{Features: kafka.Plug{}.Features(), WaitTimeout: 30 * time.Second}
}

func (kafkaHarness) Namespace(t *testing.T) contracttest.BrokerNamespace {
	s := testSettings()
	s.RetryDelay = time.Second
	e := newEnv(t, s, 0)
	return contracttest.BrokerNamespace{
		Publisher: e.broker,
		Consume: func(t *testing.T, topic ports.Topic, group string, h ports.BatchHandler) {
			t.Helper()
			// A group of its own per topic and name, with room for the
			// suite's three deliveries before the dead-letter topic.
			sub := ports.Subscription{Group: ports.ConsumerGroup("CG_CT_" + strings.ToUpper(group) + "_" + string(topic)),
				Topic: topic, Ordered: topic == ports.TopicOrderStateFIFO, MaxRetries: 5}
			e.consume(t, sub, h)
		},
		Now: time.Now,
	}
}
