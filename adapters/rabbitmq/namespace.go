package rabbitmq

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
)

// NewNamespace declares the service's topology (NewTopology under
// o.Prefix: the topic exchanges, the delay tiers, the alternate and
// dead-letter exchanges and every group's queues). RabbitMQ's redelivery
// bound is the runner's, so o.Redeliveries changes nothing here.
func (Plug) NewNamespace(ctx context.Context, ps brokerplug.Settings, o brokerplug.NamespaceOptions) (brokerplug.Namespace, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("rabbitmq namespace: settings of type %T", ps)
	}
	s.Prefix = o.Prefix
	rc := s.ClientConfig(brokerplug.Neutral{})
	top, err := NewTopology(rc)
	if err != nil {
		return nil, err
	}
	if err := Declare(ctx, rc, top); err != nil {
		return nil, fmt.Errorf("rabbitmq namespace %s: %w", o.Prefix, err)
	}
	return &namespace{s: s, top: top}, nil
}

// namespace is a RabbitMQ namespace: a declared topology.
type namespace struct {
	s   Settings
	top Topology
}

func (n *namespace) Prefix() string                { return n.s.Prefix }
func (n *namespace) Settings() brokerplug.Settings { return n.s }

func (n *namespace) Env() []string {
	return []string{"SECKILL_BROKER=" + PlugName, "SECKILL_RABBITMQ_URL=" + n.s.URL, "SECKILL_RABBITMQ_PREFIX=" + n.s.Prefix}
}

// Close deletes the topology, messages included, on a connection of its
// own (its dial bounded by 10 s).
func (n *namespace) Close(context.Context) error {
	conn, err := amqp.DialConfig(n.s.URL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return fmt.Errorf("rabbitmq namespace %s: %w", n.s.Prefix, err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq namespace %s: %w", n.s.Prefix, err)
	}
	defer func() { _ = ch.Close() }()
	if err := n.top.Delete(ch); err != nil {
		return fmt.Errorf("rabbitmq namespace %s: %w", n.s.Prefix, err)
	}
	return nil
}
