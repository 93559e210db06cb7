package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
)

// NewNamespace applies the service's topology (NewTopology under
// o.Prefix: the five topics, the business groups with their dead-letter
// topics and the dead-letter reader) on every master broker the name
// server of s lists, and waits until the name server routes every topic.
func (Plug) NewNamespace(ctx context.Context, ps brokerplug.Settings, o brokerplug.NamespaceOptions) (brokerplug.Namespace, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("rocketmq namespace: settings of type %T", ps)
	}
	s.TopicPrefix = o.Prefix
	var opts []TopologyOption
	if o.Redeliveries > 0 {
		opts = append(opts, WithBusinessRetryMaxTimes(o.Redeliveries),
			WithRetryMaxTimes(GroupDLQReader, max(GroupDLQReader.RetryMaxTimes(), o.Redeliveries+DLQReaderMargin)))
	}
	top, err := NewTopology(s.ClientConfig(brokerplug.Neutral{}), opts...)
	if err != nil {
		return nil, err
	}
	admin := NewAdmin("", s.Namesrv, 10*time.Second)
	masters, err := admin.Masters(ctx)
	if err != nil {
		return nil, fmt.Errorf("rocketmq namespace %s: %w", o.Prefix, err)
	}
	ns := &namespace{s: s, top: top}
	for _, m := range masters {
		ns.admins = append(ns.admins, admin.ForBroker(m))
	}
	for i, a := range ns.admins {
		if _, err := top.Apply(ctx, a); err != nil {
			err = fmt.Errorf("rocketmq namespace %s on %s: %w", o.Prefix, masters[i], err)
			return nil, errors.Join(err, ns.Close(context.WithoutCancel(ctx)))
		}
	}
	return ns, nil
}

// namespace is a RocketMQ namespace: a topology applied on every master.
type namespace struct {
	s      Settings
	top    Topology
	admins []*Admin
}

func (n *namespace) Prefix() string                { return n.s.TopicPrefix }
func (n *namespace) Settings() brokerplug.Settings { return n.s }

func (n *namespace) Env() []string {
	return []string{"SECKILL_BROKER=" + PlugName, "SECKILL_ROCKETMQ_ENDPOINT=" + n.s.Endpoint, "SECKILL_TOPIC_PREFIX=" + n.s.TopicPrefix}
}

// Close deletes, on every master, the topics (the broker drops their pop
// retry topics), each group's %RETRY% topic (created when the broker
// dead-letters) and the groups.
func (n *namespace) Close(ctx context.Context) error {
	var errs []error
	for _, a := range n.admins {
		for _, t := range n.top.Topics {
			errs = append(errs, a.DeleteTopic(ctx, t.Name))
		}
		for _, g := range n.top.Groups {
			errs = append(errs, a.DeleteTopic(ctx, "%RETRY%"+g.Name), a.DeleteGroup(ctx, g.Name))
		}
	}
	return errors.Join(errs...)
}
