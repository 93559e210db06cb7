package rabbitmq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// TestBrokerContract runs the shared publisher and consumer suite (also
// run against RocketMQ and the memory broker) against RabbitMQ, each case
// in a namespace of its own (rabbittest.NewEnv).
func TestBrokerContract(t *testing.T) {
	t.Parallel()
	contracttest.Broker(t, rabbitHarness{})
}

// rabbitHarness gives the suite a namespace per case, a Publisher on it
// and one Runner per consumer group.
type rabbitHarness struct{}

// Options: a RetryAfter redelivery is never early (the delay tiers park a
// message until its absolute delivery time has passed, README.md).
func (rabbitHarness) Options() contracttest.BrokerOptions {
	return contracttest.BrokerOptions{Features: rabbitmq.Plug{}.Features()}
}

func (rabbitHarness) Namespace(t *testing.T) contracttest.BrokerNamespace {
	env := rabbittest.NewEnv(t, nil, rabbittest.WithShards(4))
	return contracttest.BrokerNamespace{
		Publisher: startPublisher(t, env.Config),
		Consume: func(t *testing.T, topic ports.Topic, group string, h ports.BatchHandler) {
			t.Helper()
			// A group of its own per topic and name, with room for the
			// suite's three deliveries before the dead-letter queue.
			sub := ports.Subscription{Group: ports.ConsumerGroup("CG_CT_" + strings.ToUpper(group) + "_" + string(topic)),
				Topic: topic, Ordered: topic == ports.TopicOrderStateFIFO, MaxRetries: 5}
			runGroup(t, env, sub, 2, 8, h)
		},
		Now: time.Now,
	}
}
