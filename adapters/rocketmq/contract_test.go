package rocketmq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestBrokerContract runs the shared publisher and consumer suite (also
// run against the memory broker) against the local stack's RocketMQ, each
// case in a namespace of its own (mqtest.NewEnv).
func TestBrokerContract(t *testing.T) {
	t.Parallel()
	contracttest.Broker(t, rocketmqHarness{})
}

// rocketmqHarness gives the suite an isolated topology per namespace, a
// Publisher on it and one Runner per consumer group, with the short
// invisible duration and long poll of the other runner tests.
type rocketmqHarness struct{}

// Options: RocketMQ does everything the suite checks. A RetryAfter
// redelivery may come up to 1 s early, the local stack's timerPrecisionMs
// (a loose bound: the invisible time of a ChangeInvisibleDuration starts
// after the handler's decision, so it should never be early at all).
func (rocketmqHarness) Options() contracttest.BrokerOptions {
	return contracttest.BrokerOptions{TimerPrecision: time.Second, Features: rocketmq.Plug{}.Features()}
}

func (rocketmqHarness) Namespace(t *testing.T) contracttest.BrokerNamespace {
	env := mqtest.NewEnv(t)
	return contracttest.BrokerNamespace{
		Publisher: startPublisher(t, relaxed(env.Config), nil),
		Consume: func(t *testing.T, topic ports.Topic, group string, h ports.BatchHandler) {
			t.Helper()
			orderly := topic == ports.TopicOrderStateFIFO
			// A group of its own per topic and name, with room for the
			// suite's three deliveries before the dead-letter queue.
			name := env.CreateGroup("CG_CT_"+strings.ToUpper(group)+"_"+string(topic), orderly, 5)
			rc := fastRunner(name, map[string]string{env.Topic(topic): ""}, 2)
			rc.Orderly = orderly
			if orderly {
				rc.BatchSize = 4
			}
			startRunner(t, env.Config, rc, h, nil)
		},
		Now: time.Now,
	}
}
