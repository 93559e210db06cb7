package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
)

// NewNamespace applies the service's topology (NewTopology under
// o.Prefix: the five topics, the business groups with their dead-letter
// topics and the dead-letter reader) on every master broker the name
// server of s lists (ApplyNamespace).
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
	ns, err := ApplyNamespace(ctx, NewAdmin("", s.Namesrv, 10*time.Second), top)
	if err != nil {
		return nil, err
	}
	return pluggedNamespace{Namespace: ns, s: s}, nil
}

// pluggedNamespace is a Namespace as brokerplug sees it.
type pluggedNamespace struct {
	*Namespace
	s Settings
}

func (n pluggedNamespace) Prefix() string                { return n.s.TopicPrefix }
func (n pluggedNamespace) Settings() brokerplug.Settings { return n.s }

func (n pluggedNamespace) Env() []string {
	return []string{"SECKILL_BROKER=" + PlugName, "SECKILL_ROCKETMQ_ENDPOINT=" + n.s.Endpoint, "SECKILL_TOPIC_PREFIX=" + n.s.TopicPrefix}
}

// Namespace is a topology applied on every master broker of a name
// server, deleted there by Close, with the topics and groups added to it
// later (Create).
type Namespace struct {
	// Topology is what ApplyNamespace applied.
	Topology Topology
	// Masters are the brokers the namespace lives on (Admin.Masters,
	// sorted by name).
	Masters []BrokerRef
	// Admins holds the admin client of each of Masters, in that order.
	Admins []*Admin

	mu     sync.Mutex
	topics []string // created by Create, deleted by Close
	groups []string
}

// ApplyNamespace applies top (Topology.Apply: create what is missing, wait
// for the name server's routes) on every master broker the name server of
// admin lists; on an error what it created is deleted again.
func ApplyNamespace(ctx context.Context, admin *Admin, top Topology) (*Namespace, error) {
	masters, err := admin.Masters(ctx)
	if err != nil {
		return nil, fmt.Errorf("rocketmq namespace %s: %w", top.Prefix, err)
	}
	ns := &Namespace{Topology: top, Masters: masters}
	for _, m := range masters {
		ns.Admins = append(ns.Admins, admin.ForBroker(m))
	}
	for i, a := range ns.Admins {
		if _, err := top.Apply(ctx, a); err != nil {
			err = fmt.Errorf("rocketmq namespace %s on %s: %w", top.Prefix, masters[i], err)
			return nil, errors.Join(err, ns.Close(context.WithoutCancel(ctx)))
		}
	}
	return ns, nil
}

// Create creates more topics and groups of the namespace on every master,
// concurrently (a broker serialises topic creation, groups are
// independent); Close deletes them too.
func (n *Namespace) Create(ctx context.Context, topics []TopicSpec, groups []GroupSpec) error {
	n.mu.Lock()
	for _, s := range topics {
		n.topics = append(n.topics, s.Name)
	}
	for _, s := range groups {
		n.groups = append(n.groups, s.Name)
	}
	n.mu.Unlock()
	errs := make(chan error, (len(topics)+len(groups))*len(n.Admins))
	var wg sync.WaitGroup
	for i, a := range n.Admins {
		on := func(err error) error {
			if err != nil {
				return fmt.Errorf("on %s: %w", n.Masters[i], err)
			}
			return nil
		}
		for _, s := range topics {
			wg.Go(func() { errs <- on(a.CreateTopic(ctx, s)) })
		}
		for _, s := range groups {
			wg.Go(func() { errs <- on(a.CreateGroup(ctx, s)) })
		}
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// Close deletes, on every master, the namespace's topics (the broker drops
// their pop retry topics), each group's %RETRY% topic (created when the
// broker dead-letters; deleting one that was never created fails, and that
// failure is not reported) and the groups. It returns the other failures,
// joined.
func (n *Namespace) Close(ctx context.Context) error {
	n.mu.Lock()
	topics, groups := append([]string(nil), n.topics...), append([]string(nil), n.groups...)
	n.mu.Unlock()
	for _, s := range n.Topology.Topics {
		topics = append(topics, s.Name)
	}
	for _, s := range n.Topology.Groups {
		groups = append(groups, s.Name)
	}
	var errs []error
	for _, a := range n.Admins {
		for _, t := range topics {
			errs = append(errs, a.DeleteTopic(ctx, t))
		}
		for _, g := range groups {
			_ = a.DeleteTopic(ctx, "%RETRY%"+g)
			errs = append(errs, a.DeleteGroup(ctx, g))
		}
	}
	return errors.Join(errs...)
}
