package kafka

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"text/tabwriter"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/ports"
)

// TopologyCommand returns Kafka's part of `seckill topology`: no flags of
// its own, and the administration of the service's topics for settings s
// (SECKILL_KAFKA_BROKERS, _PREFIX, _PARTITIONS, _REPLICATION; o.Prefix
// replaces the prefix): every logical topic and each business group's
// retry and dead-letter topic. Kafka has no consumer group to declare: a
// group exists once its consumer joins.
func (Plug) TopologyCommand() brokerplug.TopologyCommand { return topologyCommand{} }

// topologyCommand is the Kafka brokerplug.TopologyCommand.
type topologyCommand struct{}

// DeclareFlags declares nothing: Kafka's topology takes its shape from the
// settings.
func (topologyCommand) DeclareFlags(*flag.FlagSet, brokerplug.TopologySub) {}

func (topologyCommand) Open(ps brokerplug.Settings, o brokerplug.TopologyOptions) (brokerplug.Topology, error) {
	s, ok := ps.(Settings)
	if !ok {
		return nil, fmt.Errorf("kafka topology: settings of type %T", ps)
	}
	if o.Prefix != nil {
		s.Prefix = *o.Prefix
	}
	if err := s.validated(); err != nil {
		return nil, fmt.Errorf("%w: %w", brokerplug.ErrInvalidTopology, err)
	}
	return topologyAdmin{s: s, topics: serviceTopics(s.Prefix, ports.Subscriptions())}, nil
}

// topologyAdmin is the Kafka brokerplug.Topology and its one target: the
// cluster's brokers share the topics.
type topologyAdmin struct {
	s      Settings
	topics []string
}

// Show writes each topic with the partitions and replication the
// settings give it.
func (a topologyAdmin) Show(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tREPLICATION")
	for _, t := range a.topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", t, a.s.Partitions, a.s.Replication)
	}
	return tw.Flush()
}

func (a topologyAdmin) Targets(context.Context) ([]brokerplug.TopologyTarget, error) {
	return brokerplug.SingleTarget(a), nil
}

// Name is empty: the cluster is the one target.
func (topologyAdmin) Name() string { return "" }

func (a topologyAdmin) Summary() string {
	return fmt.Sprintf("%d topics (prefix %q, %d partitions, replication %d) on Kafka %s", len(a.topics), a.s.Prefix,
		a.s.Partitions, a.s.Replication, a.s.Target())
}

// Apply creates the missing topics and names each one it created.
func (a topologyAdmin) Apply(ctx context.Context) ([]string, error) {
	missing, err := a.missing(ctx, a.topics)
	if err != nil {
		return nil, err
	}
	if err := createTopics(ctx, a.s, missing); err != nil {
		return nil, err
	}
	out := make([]string, len(missing))
	for i, t := range missing {
		out[i] = "topic " + t + ": created"
	}
	return out, nil
}

// Check lists the missing topics and those whose partition count differs
// from the settings' (a topic keeps its partitions: more would move keys
// between partitions, and with them the order of an order's events).
func (a topologyAdmin) Check(ctx context.Context) ([]string, error) {
	cl, adm, err := newAdmin(a.s)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	details, err := adm.ListTopics(ctx, a.topics...)
	if err != nil {
		return nil, fmt.Errorf("list kafka topics: %w", err)
	}
	var out []string
	for _, t := range a.topics {
		d, ok := details[t]
		switch {
		case !ok || d.Err != nil:
			out = append(out, "topic "+t+": missing")
		case len(d.Partitions) != a.s.Partitions:
			out = append(out, fmt.Sprintf("topic %s: %d partitions, the settings say %d", t, len(d.Partitions), a.s.Partitions))
		}
	}
	return out, nil
}

// missing returns the topics of names that do not exist.
func (a topologyAdmin) missing(ctx context.Context, names []string) ([]string, error) {
	cl, adm, err := newAdmin(a.s)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("list kafka topics: %w", err)
	}
	var out []string
	for _, t := range names {
		if d, ok := details[t]; !ok || d.Err != nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// outsideGroupName is the rule for an outside group's name: Kafka's topic
// name characters (its retry and dead-letter topics carry it).
var outsideGroupName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// AddGroup creates the retry and dead-letter topics of the outside
// consumer group name (as the service's own groups have them), so that a
// consumer built on this adapter's runner can join it; the group itself
// comes into being when its consumer joins. retries is the runner's
// bound (SECKILL_KAFKA_REDELIVERIES), not stored on the broker.
func (a topologyAdmin) AddGroup(ctx context.Context, name string, retries int) (string, error) {
	if !outsideGroupName.MatchString(name) {
		return "", fmt.Errorf("%w: group name %q: want letters, digits, '_' and '-'", brokerplug.ErrInvalidTopology, name)
	}
	if retries < 1 {
		return "", fmt.Errorf("%w: --retry-max %d: a redelivery bound must be at least 1", brokerplug.ErrInvalidTopology, retries)
	}
	g := ports.ConsumerGroup(name)
	own := []string{retryTopic(a.s.Prefix, g), dlqTopic(a.s.Prefix, g)}
	missing, err := a.missing(ctx, own)
	if err != nil {
		return "", err
	}
	if err := createTopics(ctx, a.s, missing); err != nil {
		return "", err
	}
	state := "declared"
	if len(missing) == 0 {
		state = "already declared: nothing changed"
	}
	topic, err := ports.SpecOf(ports.TopicOrderEvent)
	if err != nil {
		return "", errors.New("kafka topology: no ORDER_EVENT topic")
	}
	return fmt.Sprintf("group %s%s: %s (retry topic %s, dead letters to %s), reading topic %s on Kafka",
		a.s.Prefix, name, state, own[0], own[1], topicName(a.s.Prefix, topic)), nil
}
