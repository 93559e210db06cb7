package rocketmq_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestReceiveFromEachBroker: the proxy's route names every master the
// namespace lives on (one on the local stack, broker-a and broker-b on its
// cluster mode), a receive that names a broker gets only that broker's
// messages, and one that names a broker the proxy does not route to gets
// messages from any broker (the proxy's own choice) instead of failing.
func TestReceiveFromEachBroker(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	cfg := relaxed(env.Config)
	topic := env.Topic(ports.TopicOrderCreate)
	group := env.Group(rocketmq.GroupOrderCreate)

	var want []string
	for _, m := range env.Masters {
		if m.Name != "" {
			want = append(want, m.Name)
		}
	}
	slices.Sort(want)
	got, err := rocketmq.ReadableBrokersForTest(cfg, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) > 0 && !slices.Equal(got, want) {
		t.Fatalf("the route names brokers %v, the name server lists masters %v", got, want)
	}
	if len(got) == 0 {
		t.Fatal("the route names no broker")
	}

	// Enough messages that every broker gets some (sends spread over all
	// queues of all brokers).
	n := 8 * len(got)
	pub := startPublisher(t, cfg, nil)
	for i := range n {
		mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`)})
	}
	for _, b := range got {
		views, err := rocketmq.ReceiveFromBrokerForTest(cfg, group, topic, b, 1, 30*time.Second, 30*time.Second)
		if err != nil {
			t.Fatalf("receive from %s: %v", b, err)
		}
		for _, v := range views {
			if from := rocketmq.BrokerOfForTest(v.GetReceiptHandle()); from != b {
				t.Errorf("a receive that named %s got a message of %q (receipt handle %q)", b, from, v.GetReceiptHandle())
			}
		}
	}
	if _, err := rocketmq.ReceiveFromBrokerForTest(cfg, group, topic, "no-such-broker", 1, 30*time.Second, 30*time.Second); err != nil {
		t.Errorf("a receive that named an unknown broker: %v", err)
	}
}
